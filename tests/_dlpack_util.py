"""Helpers shared by the DLPack tests: capsule names and a consumer that records what it asked."""
import ctypes

get_name = ctypes.PYFUNCTYPE(ctypes.c_char_p, ctypes.py_object)(("PyCapsule_GetName", ctypes.pythonapi))


def capsule_name(cap):
    return get_name(cap).decode()


class Spy:
    """A consumer-side proxy: records the kwargs a consumer passes to __dlpack__ and the capsule name."""

    def __init__(self, a):
        self.a = a
        self.calls = []

    def __dlpack__(self, **kw):
        cap = self.a.__dlpack__(**kw)
        self.calls.append((kw, capsule_name(cap)))
        return cap

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()
