"""Host ops: steps that call back into Python on the host (``py_func``, ``print``), as
callbacks inside the one compiled XLA step."""
