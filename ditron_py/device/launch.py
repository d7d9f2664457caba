"""ditron.device's launches: the part of Program that makes kernels (built-in templates, @ditron.jit kernels)
and records their launches, checking every argument against what the kernel takes."""
from __future__ import annotations

import math
from typing import Any, Sequence

from ..errors import DitronError
from .kernel import (_POINTER_DTYPES, _SCALAR_TYPES, JitKernel, Kernel, _buffer_args, _gemm_operands, _pad_args,
                     _template_dtype)
from .values import DTYPES, TILE_ORDERS, Buffer, Index, Pad, _as_index, _call_site, _error, _Op


class _Launches:
    """Program's kernels and launches (a mixin of Program: it uses its buffers, scope and streams)."""

    def gemm(self, m: int, n: int, k: int, *, in_dtype: str = "bf16", out_dtype: str | None = None,
             **fields: Any) -> Kernel:
        """The built-in GEMM template ``C[m, n] = A[m, k] @ B[k, n]`` (kernels/gemm/: its record fields, e.g.
        ``wait={"arg": "ready", "rows_per_slot": R}`` for per-tile waits, block sizes, ``persistent``). Launch it
        with its arguments in the record's order: a, b, c, then those its parts name."""
        return Kernel("gemm", (m, n, k), {"in_dtype": _template_dtype(in_dtype, "gemm in_dtype"),
                                          **({"out_dtype": _template_dtype(out_dtype, "gemm out_dtype")}
                                             if out_dtype else {}), **fields}, _call_site())

    def template(self, name: str, *args: Any, **fields: Any) -> Kernel:
        """Any built-in template (gemm, copy, reduce, elementwise, grouped_gemm), with its make_record's
        arguments."""
        from ..kernels import TEMPLATES
        if name not in TEMPLATES:
            raise _error(f"there is no kernel template '{name}'; templates: {', '.join(TEMPLATES)}")
        return Kernel(name, args, fields, _call_site())

    def jit(self, fn: Any, *, signature: dict[str, str], constexprs: dict[str, Any] | None = None,
            wait: dict[str, str] | None = None, **options: Any) -> JitKernel:
        """A user ``@ditron.jit`` kernel for this program: ``signature`` gives the Triton type of each parameter
        ("*bf16", "*fp32", "*i32", "i32", ...), ``constexprs`` the values of its ``tl.constexpr`` ones; ``options``
        are its compile options (num_warps, ...). Launch it with a grid; its hidden arguments (rank, heap bases,
        wait bounds) are bound by the executor. ``wait={"arg": pad parameter, "value_arg": value parameter}`` says
        which pad the kernel waits on for which value, so that a wait that times out names that pad's slots."""
        where = _call_site()
        if not (hasattr(fn, "arg_names") and hasattr(fn, "constexpr_names") and callable(getattr(fn, "compile", None))):
            raise _error(f"jit takes a @ditron.jit kernel, got {type(fn).__name__}", where)
        constexprs = dict(constexprs or {})
        try:
            fn._source(dict(signature), constexprs)  # the kernel's own checks of names and constexprs
        except DitronError as err:
            raise _error(str(err.diagnostics[0].message), where) from None
        for name in fn.arg_names:
            ty = signature.get(name)
            if name in fn.constexpr_names:
                continue
            if ty not in _POINTER_DTYPES and ty not in _SCALAR_TYPES:
                raise _error(f"kernel '{fn.__name__}': parameter '{name}' has type {ty!r}; a device program passes "
                             f"buffers ({', '.join(_POINTER_DTYPES)}) and index values ({', '.join(_SCALAR_TYPES)})",
                             where)
        if wait is not None:
            if not isinstance(wait, dict) or set(wait) != {"arg", "value_arg"}:
                raise _error(f"jit: wait is {{'arg': pad parameter, 'value_arg': value parameter}}, got {wait!r}",
                             where)
            if signature.get(wait["arg"]) != "*i32":
                raise _error(f"jit: wait arg {wait['arg']!r} is not an i32 pad parameter (*i32) of "
                             f"'{fn.__name__}'", where)
            if signature.get(wait["value_arg"]) not in _SCALAR_TYPES:
                raise _error(f"jit: wait value_arg {wait['value_arg']!r} is not an integer parameter of "
                             f"'{fn.__name__}'", where)
        return JitKernel(fn, dict(signature), constexprs, dict(options), where, dict(wait) if wait else None)

    def launch(self, kernel: Kernel, args: Sequence[Any], *, grid: Sequence[int] | int | None = None,
               sm_budget: int | None = None, stream: int = 0, tile_order: str | None = None) -> None:
        """Launch ``kernel`` on ``stream`` with ``args`` (buffers of the program and index values, in the
        kernel's argument order). ``grid``: the programs to launch (a template launches exactly its own grid:
        given, it must match). ``sm_budget``: the SMs it may hold (a template's num_sms). ``tile_order``:
        row_major, grouped or rank_rotated (templates with a tile order)."""
        where = _call_site()
        if isinstance(kernel, JitKernel):
            self._launch_jit(kernel, args, grid, sm_budget, stream, tile_order, where)
            return
        if not isinstance(kernel, Kernel):
            raise _error(f"launch takes a kernel (Program.gemm(...), Program.template(...), Program.jit(...)), got "
                         f"{type(kernel).__name__}", where)
        if tile_order is not None and tile_order not in TILE_ORDERS:
            raise _error(f"launch: tile_order must be one of {', '.join(TILE_ORDERS)}, got {tile_order!r}", where)
        if sm_budget is not None and (isinstance(sm_budget, bool) or not isinstance(sm_budget, int) or sm_budget < 1):
            raise _error(f"launch: sm_budget must be a positive int, got {sm_budget!r}", where)
        rec = kernel.record(tile_order=tile_order, sm_budget=sm_budget, target=self.target, where=where)
        names = list(rec.get("args", []))
        from ..passes import device_kernels as K
        from ..kernels import gemm as gemm_template
        scratch = gemm_template.scratch(rec) if rec["template"] == "gemm" else None
        args = list(args)
        if len(args) != len(names):
            raise _error(f"launch of the {kernel.template} kernel: {len(args)} argument(s) given, it takes "
                         f"{len(names)}: {', '.join(names)}", where)
        checked = [self._launch_arg(rec, name, a, where) for name, a in zip(names, args)]
        full_grid = list(K.grid_of(rec))
        if grid is not None:
            want = [grid] if isinstance(grid, int) else list(grid)
            want = want + [1] * (3 - len(want))
            if want != full_grid:
                raise _error(f"launch: the {kernel.template} template launches exactly grid {full_grid} for this "
                             f"record, not {want} (change its fields, e.g. num_sms / sm_budget, instead)", where)
        self._scope.append(_Op("launch", where, {"record": rec, "args": checked, "grid": full_grid,
                                                 "sm_budget": K.sm_budget_of(rec), "scratch": scratch,
                                                 "tile_order": rec.get("tile_order", "grouped"),
                                                 "stream": self._stream(stream, where)}))

    def _launch_jit(self, kernel: JitKernel, args, grid, sm_budget, stream, tile_order, where) -> None:
        if grid is None:
            raise _error(f"launch of @ditron.jit kernel '{kernel.name}': give its grid (programs to launch)", where)
        g = [grid] if isinstance(grid, int) else list(grid)
        if not 1 <= len(g) <= 3 or any(isinstance(x, bool) or not isinstance(x, int) or x < 1 for x in g):
            raise _error(f"launch: grid is 1 to 3 positive ints, got {grid!r}", where)
        g = g + [1] * (3 - len(g))
        if tile_order not in (None, "row_major"):
            raise _error(f"launch: a @ditron.jit kernel visits its programs as it is written; tile_order "
                         f"{tile_order!r} applies to templates only", where)
        for other in self._jit_launches():
            if other.name == kernel.name and other.key(self.target) != kernel.key(self.target):
                raise _error(f"launch: kernel '{kernel.name}' is launched with two specialisations in one program "
                             "(one compiled kernel per name): give both launches the same signature and constexprs",
                             where)
        params = kernel.params
        args = list(args)
        if len(args) != len(params):
            raise _error(f"launch of kernel '{kernel.name}': {len(args)} argument(s) given, it takes {len(params)}: "
                         f"{', '.join(params)}", where)
        checked = []
        for name, a in zip(params, args):
            ty = kernel.signature[name]
            if ty in _SCALAR_TYPES:
                if isinstance(a, Buffer):
                    raise _error(f"launch: argument '{name}' of kernel '{kernel.name}' is {ty}, got buffer "
                                 f"'{a.name}'", where)
                checked.append(_as_index(a, self, f"launch argument '{name}'"))
                continue
            buf = self._buffer(a, f"launch argument '{name}'")
            if buf.dtype != _POINTER_DTYPES[ty]:
                raise _error(f"launch: argument '{name}' of kernel '{kernel.name}' is {ty}, got '{buf.name}' of "
                             f"{buf.dtype}", where)
            checked.append(buf)
        budget = math.prod(g) if sm_budget is None else sm_budget
        self._scope.append(_Op("launch", where, {"jit": kernel, "args": checked, "grid": g, "sm_budget": budget,
                                                 "tile_order": "row_major", "stream": self._stream(stream, where)}))

    def _jit_launches(self) -> list[JitKernel]:
        out = []

        def visit(ops):
            for op in ops:
                if op.kind == "launch" and "jit" in op.fields:
                    out.append(op.fields["jit"])
                visit(op.body)
        visit(self._ops)
        return out

    def _launch_arg(self, rec, name: str, a: Any, where):
        """Check one launch argument against what the template expects of it (shapes and dtypes of a GEMM's
        operands, pads where the record waits or notifies)."""
        if isinstance(a, (Index, int)) and not isinstance(a, bool):
            if name in _buffer_args(rec):
                raise _error(f"launch: argument '{name}' of the {rec['template']} kernel is a buffer, got the "
                             f"index value {a!r}", where)
            return _as_index(a, self, f"launch argument '{name}'")
        buf = self._buffer(a, f"launch argument '{name}'")
        if name not in _buffer_args(rec):
            raise _error(f"launch: argument '{name}' of the {rec['template']} kernel is an index value, got "
                         f"buffer '{buf.name}'", where)
        if name in _pad_args(rec) and not isinstance(buf, Pad):
            raise _error(f"launch: argument '{name}' of the {rec['template']} kernel is a signal pad, got "
                         f"'{buf.name}' {list(buf.shape)} {buf.dtype}", where)
        expect = _gemm_operands(rec).get(name)
        if expect is not None:
            shape, dtype = expect
            if tuple(buf.shape) != tuple(shape) or DTYPES[buf.dtype][1] != dtype:
                raise _error(f"launch: argument '{name}' of the gemm kernel must be {list(shape)} {dtype}, got "
                             f"'{buf.name}' {list(buf.shape)} {buf.dtype}", where)
        return buf

    # ---- IR
