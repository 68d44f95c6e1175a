"""An example tooldeck tool pack: two small tools, one of them sandboxed."""
