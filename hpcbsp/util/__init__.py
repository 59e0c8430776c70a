"""Dependency-free helpers that every layer may use (command-line parsing)."""
