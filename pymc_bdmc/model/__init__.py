"""Compiled densities, exact simulation and input checks for PyMC models."""
