"""Jinja2 templates of the model repository (package data of tritongen)."""
