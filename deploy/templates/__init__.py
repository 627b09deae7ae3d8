"""Jinja2 templates of the deployment files (package data of tritongen)."""
