"""The model's tools, one module per family; :mod:`refagent.tools.base` is the contract."""
