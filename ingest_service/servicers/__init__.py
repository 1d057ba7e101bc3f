"""The write side's transport: one servicer per gRPC service (proto <-> domain mapping only)."""
