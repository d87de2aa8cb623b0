"""The package version (its own module, so that modules stamping results need not import the
package they belong to)."""

__version__ = "0.1.0"
