"""Result assembly (xarray DataTree)."""
