"""What each ditron.ops op computes, per rank, from every rank's inputs: the semantics the tests and users check
the compiled programs against. It takes torch tensors or numpy arrays and needs neither MLIR nor a GPU, so a GPU box
(torch + triton only) checks against it too; task programs have their own reference (ditron.reference), which
evaluates IR and needs the MLIR bindings. ``ditron.ops.reference`` is this function."""
from __future__ import annotations

from typing import Any, Sequence


def reference(sig: Any, per_rank_inputs: Sequence[Sequence[Any]]) -> list[Any]:
    """What the op computes, per rank, from every rank's inputs (numpy arrays or torch tensors; float64 for
    numpy, float32 for torch): the semantics the tests check the compiled programs against."""
    W, p = sig.world_size, sig.param
    mod = _array_module(per_rank_inputs[0][0])
    cat = mod.concatenate if mod.__name__ == "numpy" else mod.cat
    up = (lambda x: x.astype("float64")) if mod.__name__ == "numpy" else (lambda x: x.float())
    if sig.op == "grouped_gemm":
        return [grouped_gemm(*row, gated=sig.param["gated"]) for row in per_rank_inputs]
    xs = [[up(x) for x in row] for row in per_rank_inputs]
    if sig.op == "ag_gemm":
        gathered = cat([row[0] for row in xs], 0)
        return [gathered @ row[1] for row in xs]
    if sig.op in ("gemm_rs", "gemm_ar"):
        total = sum(row[0] @ row[1] for row in xs)
        if sig.op == "gemm_ar":
            return [total for _ in range(W)]
        part = total.shape[0] // W
        return [total[r * part:(r + 1) * part] for r in range(W)]
    if sig.op == "all_gather":
        gathered = cat([row[0] for row in xs], p["dim"])
        return [gathered for _ in range(W)]
    if sig.op == "all_to_all":
        sd, cd = p["split_dim"], p["concat_dim"]
        size = xs[0][0].shape[sd] // W
        part = lambda x, r: x[tuple(slice(r * size, (r + 1) * size) if d == sd else slice(None)  # noqa: E731
                                    for d in range(x.ndim))]
        return [cat([part(row[0], r) for row in xs], cd) for r in range(W)]
    total = sum(row[0] for row in xs)
    if sig.op == "all_reduce":
        return [total for _ in range(W)]
    dim = p["dim"]
    part = total.shape[dim] // W
    index = lambda r: tuple(slice(r * part, (r + 1) * part) if d == dim else slice(None)  # noqa: E731
                            for d in range(total.ndim))
    return [total[index(r)] for r in range(W)]


def grouped_gemm(x: Any, w: Any, sizes: Any, gated: str | None = None) -> Any:
    """One rank's grouped GEMM: group g is the next sizes[g] rows of x (a negative size counts 0, the sum cut at x's
    rows), times w[g % E]; the rows past the groups are zeros (float64 for numpy, float32 for torch). ``gated``
    ('silu'): w [E, K, 2N], the result silu(x @ w[..., :N]) * (x @ w[..., N:])."""
    mod = _array_module(x)
    n = w.shape[2] // 2 if gated else w.shape[2]
    if mod.__name__ == "numpy":
        x, w, counts = x.astype("float64"), w.astype("float64"), [int(v) for v in mod.asarray(sizes).reshape(-1)]
        out = mod.zeros((x.shape[0], n))
    else:
        x, w, counts = x.float(), w.float(), [int(v) for v in sizes.reshape(-1).tolist()]
        out = x.new_zeros((x.shape[0], n))
    if gated not in (None, "silu"):
        raise ValueError(f"grouped_gemm reference: gated {gated!r} is not 'silu' or None")
    start = 0
    for g, size in enumerate(counts):
        end = min(start + max(size, 0), x.shape[0])
        y = x[start:end] @ w[g % w.shape[0]]
        if gated:
            gate, up = y[:, :n], y[:, n:]
            y = gate / (1 + mod.exp(-gate)) * up
        out[start:end] = y
        start = end
    return out


def _array_module(x):
    import sys
    if type(x).__module__.startswith("torch"):
        return sys.modules["torch"]
    import numpy
    return numpy


def all_to_all_sized(xs: Sequence[Any], splits: Sequence[Any], capacity: int) -> tuple[list[Any], list[Any]]:
    """The bounded all_to_all of run-time split sizes along dim 0, per rank: (outputs, recv_counts). Rank p's x
    sends its rows in order, splits[p][d] of them to rank d -- a negative size counts 0, and sizes past x's rows
    are cut at its end (every rank cuts alike); rank r's output holds, in source rank order, the rows each rank
    sent it, up to ``capacity`` rows (the rest is the overflow: ``recv_counts.sum() - capacity`` rows, not
    written), then zeros; recv_counts[q] = the rows q sent it (int32). numpy arrays or torch tensors."""
    import numpy as np
    w = len(xs)
    as_np = [np.asarray(x.detach().cpu().float()) if hasattr(x, "detach") else np.asarray(x) for x in xs]
    sizes = np.maximum(np.stack([np.asarray(s.cpu() if hasattr(s, "cpu") else s, np.int64).reshape(w)
                                 for s in splits]), 0)
    outs, recvs = [], []
    sent = []
    for p in range(w):
        ends = np.minimum(np.cumsum(sizes[p]), as_np[p].shape[0])
        starts = np.concatenate([[0], ends[:-1]])
        sent.append([as_np[p][a:b] for a, b in zip(starts, ends)])
    for r in range(w):
        rows = np.concatenate([sent[q][r] for q in range(w)], axis=0)[:capacity]
        out = np.zeros((capacity,) + as_np[0].shape[1:], as_np[0].dtype)
        out[:rows.shape[0]] = rows
        outs.append(out)
        recvs.append(np.array([sent[q][r].shape[0] for q in range(w)], np.int32))
    return outs, recvs
