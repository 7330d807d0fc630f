"""Built-in extensions: plain Python on the runtime contract, no Django."""
