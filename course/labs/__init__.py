"""Lab framework: parameters, tables and the registry of the lessons' experiments."""
