"""The specialization of a ``@ditron.jit`` kernel on its arguments, as stock ``triton.jit`` does it.

Triton compiles one variant of a kernel per *specialization key*: a pointer argument whose address is a multiple of
16 bytes, and an integer argument whose value is a multiple of 16, get ``tt.divisibility = 16`` on the kernel's
parameter -- the fact Triton's axis analysis needs to vectorise loads and stores and to pipeline them
(``cp.async`` / TMA need 16-byte aligned rows). ``@ditron.jit`` does the same:

* ``divisible(kernel, values)`` -- the parameters that may be specialised for the given argument values (a torch
  tensor or anything with ``data_ptr()``, a numpy array placed at a known address, an int), respecting the
  kernel's ``do_not_specialize`` (no specialization at all) and ``do_not_specialize_on_alignment`` (no
  divisibility) lists, as Triton's do;
* ``attrs(kernel, names)`` -- those parameters as the ``attrs`` of Triton's ``ASTSource``: the TTIR's
  ``tt.divisibility = 16`` argument attributes;
* ``violations(kernel, names, values)`` -- which assumptions the values at a call break (the key of another
  variant, never wrong code: ``run_virtual`` compiles the variant of each call's key; the executor checks an
  artifact's recorded assumptions before every launch, see ``ditron_py/runtime/actions.py``).

Triton also turns an integer argument equal to 1 into a constant. ``@ditron.jit`` does not: an artifact's kernels
keep every parameter in their ABI (the executor binds them by position), so a value that is always 1 (a unit
stride) is written as a ``tl.constexpr`` parameter instead.
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping

from ..errors import CompileError
from ..schema import DIVISIBILITY  # bytes for pointers, units for integers (Triton's "D" specialization)
from ..schema import DIVISIBLE_META as METADATA_KEY  # the compiled kernel's metadata entry: its divisible parameters


def _int_like(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) or type(v).__name__ in ("int32", "int64", "uint32",
                                                                                  "uint64")


def address(v: Any) -> int | None:
    """The address a pointer argument holds (a tensor's ``data_ptr()``); None for values that are not pointers."""
    ptr = getattr(v, "data_ptr", None)
    if callable(ptr):
        return int(ptr())
    return None


def divisible(kernel, values: Mapping[str, Any]) -> frozenset[str]:
    """The kernel's runtime parameters that get ``tt.divisibility = 16`` for these argument values: pointers whose
    address and integers whose value is a multiple of 16, less the kernel's do_not_specialize and
    do_not_specialize_on_alignment parameters. ``values`` maps parameter names to values; a pointer's value is
    anything with ``data_ptr()`` (a torch tensor); names missing from ``values`` are not specialised."""
    out = set()
    skip = set(kernel.do_not_specialize) | set(kernel.do_not_specialize_on_alignment)
    for name in kernel.runtime_arg_names:
        if name in skip or name not in values:
            continue
        v = values[name]
        addr = address(v)
        if addr is not None:
            if addr % DIVISIBILITY == 0:
                out.add(name)
        elif _int_like(v) and int(v) % DIVISIBILITY == 0:
            out.add(name)
    return frozenset(out)


def check_names(kernel, names: Iterable[str], signature: Mapping[str, str]) -> frozenset[str]:
    """``names`` checked as divisible parameters of kernel for ``signature``: runtime parameters of pointer or
    integer type that the kernel does not exclude from specialization; a CompileError naming the first that is
    not."""
    if isinstance(names, str):
        raise CompileError(f"kernel '{kernel.__name__}': divisible= takes parameter names (a list), got the string "
                           f"{names!r}")
    names = frozenset(names)
    for name in sorted(names):
        if name not in kernel.arg_names:
            raise CompileError(f"kernel '{kernel.__name__}': divisible= names '{name}', which is not one of its "
                               f"parameters ({', '.join(kernel.arg_names)})")
        if name in kernel.constexpr_names or signature.get(name) == "constexpr":
            raise CompileError(f"kernel '{kernel.__name__}': divisible= names '{name}', a tl.constexpr parameter "
                               "(its value is known: nothing to assume)")
        ty = signature.get(name, "")
        if not (ty.startswith("*") or ty[:1] in ("i", "u")):
            raise CompileError(f"kernel '{kernel.__name__}': divisible= names '{name}' of type {ty!r}; only pointer "
                               "and integer parameters are specialised on divisibility")
        excluded = ("do_not_specialize" if name in kernel.do_not_specialize else
                    "do_not_specialize_on_alignment" if name in kernel.do_not_specialize_on_alignment else None)
        if excluded:
            raise CompileError(f"kernel '{kernel.__name__}': divisible= names '{name}', which the kernel lists in "
                               f"@ditron.jit({excluded}=...)")
    return names


def attrs(kernel, names: Iterable[str]) -> dict[tuple[int], list[list[Any]]]:
    """The divisible parameters as Triton's ASTSource attrs (keyed by the parameter's index in the kernel)."""
    return {(kernel.arg_names.index(n),): [["tt.divisibility", DIVISIBILITY]] for n in sorted(names)}


def violations(kernel, names: Iterable[str], values: Mapping[str, Any]) -> list[str]:
    """The parameters of ``names`` whose value here is not a multiple of 16 (a pointer's address, an integer):
    one line each, e.g. "'a_ptr' at address 0x7f...08"."""
    out = []
    for name in sorted(names):
        v = values.get(name)
        addr = address(v)
        if addr is not None:
            if addr % DIVISIBILITY:
                out.append(f"'{name}' at address {addr:#x} (not a multiple of {DIVISIBILITY} bytes)")
        elif _int_like(v):
            if int(v) % DIVISIBILITY:
                out.append(f"'{name}' = {int(v)} (not a multiple of {DIVISIBILITY})")
    return out


def resolve_params(fn_name: str, arg_names: list[str], given: Iterable[int | str] | None,
                   what: str) -> tuple[str, ...]:
    """``do_not_specialize`` / ``do_not_specialize_on_alignment`` as parameter names (Triton takes indices or
    names); a TypeError for one the kernel does not have."""
    if given is None:
        return ()
    if isinstance(given, (str, int)):
        given = [given]
    out = []
    for g in given:
        if isinstance(g, bool) or not isinstance(g, (int, str)):
            raise TypeError(f"@ditron.jit({what}=...) of '{fn_name}' takes parameter names or indices, got {g!r}")
        if isinstance(g, int):
            if not 0 <= g < len(arg_names):
                raise TypeError(f"@ditron.jit({what}=...) of '{fn_name}': index {g} is out of range for its "
                                f"{len(arg_names)} parameters")
            g = arg_names[g]
        elif g not in arg_names:
            raise TypeError(f"@ditron.jit({what}=...) of '{fn_name}': it has no parameter '{g}' (parameters: "
                            f"{', '.join(arg_names)})")
        out.append(g)
    return tuple(dict.fromkeys(out))
