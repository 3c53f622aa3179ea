"""Moved: leases are the runtime's, ``amber.runtime.leases``."""

from amber.runtime.leases import Claim, Leases, Liveness, wait_for

__all__ = ["Claim", "Leases", "Liveness", "wait_for"]
