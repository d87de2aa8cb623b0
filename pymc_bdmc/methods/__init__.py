"""Evidence methods: each plugs its kernels and loop into the one driver (see ``protocol``)."""
