"""Interactive pictures, one module per phase; all drawn with matplotlib and ipywidgets, CPU included."""
