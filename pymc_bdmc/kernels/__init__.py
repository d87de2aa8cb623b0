"""Transition kernels and their pilot tuning."""
