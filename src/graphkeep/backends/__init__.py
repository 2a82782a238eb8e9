"""One module (or package) per store, each implementing :class:`graphkeep.port.Store`."""
