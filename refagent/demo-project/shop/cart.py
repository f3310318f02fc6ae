"""A shopping cart: products, their unit prices and quantities."""

from shop.pricing import line_total


class Cart:
    def __init__(self) -> None:
        self._lines: dict[str, tuple[int, int]] = {}

    def add(self, product: str, unit_price: int, quantity: int = 1) -> None:
        """Add ``quantity`` units of ``product``; adding a product again adds to its quantity."""
        _, already = self._lines.get(product, (unit_price, 0))
        self._lines[product] = (unit_price, already + quantity)

    def quantity(self, product: str) -> int:
        return self._lines.get(product, (0, 0))[1]

    def total(self) -> int:
        """The price of the whole cart, in cents."""
        return sum(line_total(price, quantity) for price, quantity in self._lines.values())
