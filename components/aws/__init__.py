"""AWS resources: the network, the machines, EFA fabric."""
