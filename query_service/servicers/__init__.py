"""The read side's transport: one servicer per gRPC service (proto <-> domain mapping only), and
`read_transport` for what several of them share."""
