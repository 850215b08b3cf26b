"""Integrators: how the weights move (exact flow, its modified flow, discrete descent)."""
