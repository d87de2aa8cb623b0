"""The package version.

In its own module, so that the modules stamping results need not import the package itself.
"""

__version__ = "0.1.0"
