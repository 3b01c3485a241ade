"""What the test modules share: builders, checks and inputs used by more than one test module.

A test module never imports another (tests/test_layout.py checks it); what two of them need lives
here, and shared fixtures live in tests/conftest.py, as pytest's documentation shows.
"""
