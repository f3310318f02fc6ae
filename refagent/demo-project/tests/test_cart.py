import unittest

from shop.cart import Cart


class CartTest(unittest.TestCase):
    def test_an_empty_cart_costs_nothing(self) -> None:
        self.assertEqual(Cart().total(), 0)

    def test_adding_a_product_twice_adds_up(self) -> None:
        cart = Cart()
        cart.add("apple", 40, 2)
        cart.add("apple", 40, 3)
        self.assertEqual(cart.quantity("apple"), 5)
        self.assertEqual(cart.total(), 200)

    def test_the_total_adds_up_every_line(self) -> None:
        cart = Cart()
        cart.add("apple", 40, 2)
        cart.add("pear", 100, 12)
        self.assertEqual(cart.total(), 80 + 1080)
