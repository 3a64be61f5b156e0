"""The live run monitor: a pure view-model (viewmodel.py) and its anywidget (monitor.py).

Only this package imports traitlets/anywidget; the protocol between Python and the ES module is
documented in PROTOCOL.md beside this file.
"""
