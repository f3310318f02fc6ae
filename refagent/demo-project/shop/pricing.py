"""Prices, in cents, and the bulk discount."""

BULK_QUANTITY = 10
"""From this many units of one product on, the bulk discount applies."""
BULK_DISCOUNT_PERCENT = 10


def line_total(unit_price: int, quantity: int) -> int:
    """What ``quantity`` units cost, in cents, with the bulk discount when it applies."""
    if unit_price < 0 or quantity < 0:
        raise ValueError("prices and quantities cannot be negative")
    total = unit_price * quantity
    if quantity > BULK_QUANTITY:
        total -= total * BULK_DISCOUNT_PERCENT // 100
    return total
