"""Built-in interconnect checks, collected by ``pytest -m p2p --pyargs pytest_p2p``."""
