"""A tiny shop: prices and a cart."""
