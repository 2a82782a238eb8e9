"""One module (or package) per store, each implementing :class:`graphkeep.shared.port.Store`."""
