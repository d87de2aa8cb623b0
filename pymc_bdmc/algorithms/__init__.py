"""Annealing algorithms over a frozen plan."""
