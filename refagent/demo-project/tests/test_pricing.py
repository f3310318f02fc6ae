import unittest

from shop.pricing import BULK_QUANTITY, line_total


class LineTotalTest(unittest.TestCase):
    def test_small_quantities_pay_full_price(self) -> None:
        self.assertEqual(line_total(250, 3), 750)

    def test_discount_starts_at_the_bulk_quantity(self) -> None:
        self.assertEqual(BULK_QUANTITY, 10)
        self.assertEqual(line_total(250, 10), 2250)

    def test_large_quantities_get_the_discount(self) -> None:
        self.assertEqual(line_total(100, 20), 1800)

    def test_negative_quantities_are_refused(self) -> None:
        with self.assertRaises(ValueError):
            line_total(100, -1)
