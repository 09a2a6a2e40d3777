"""Checks of the project as a whole: layering, dependencies, public face, docs, README, wheel."""
