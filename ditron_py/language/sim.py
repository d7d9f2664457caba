"""placeholder"""
import threading

_ACTIVE = threading.local()


def active():
    return getattr(_ACTIVE, "agent", None)
