"""Generates the GLM-5.3 compose files from typed variant tables and release records."""
