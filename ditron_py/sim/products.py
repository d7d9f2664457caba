"""Batched tile products: the GEMM tiles of a launch computed a block of rows at a time, with the same values.

A GEMM template's tile computes ``matmul(a, b)`` (``ditron.kernels.numerics.matmul``) on views of its regions:
``a`` rows [r, r + m) x K steps [k0, k1) of buffer A, ``b`` the same K steps x columns [n, n + w) of buffer B (or
a transposed view of B stored [N, K]). One such product per tile is a small matrix product (128 x K x 256 for the
usual tiles), which BLAS runs far below its speed, and a launch runs thousands of them. While a simulation runs,
``Products`` serves them instead: at the first tile of a row block (``rows`` rows of A, aligned) it multiplies the
whole block by every column of B over the tile's K steps in one call, keeps the result, and hands each later tile
of the block its part.

A kept block is only served while what it was computed from is unchanged: every write to a buffer (``World.write``:
copies, tile writes, a call's inputs) is recorded in ``Buffer.changes``. An entry computed at change ``u`` of B
is dropped once a later change overlaps its K steps of B. Its rows of A are tracked one by one: each row keeps the
version of A it was computed at, and a row that a later change touched is stale. A tile whose rows are all fresh
is served; else the block's stale rows (the span from the first to the last) are recomputed first, so a block
whose rows arrive in chunks (a gathered A) costs about one block product, not one per chunk. A served product is
therefore the product of the data the tile reads at the step it runs, computed in a larger block (BLAS may sum in
another order: float32 rounding differences only). The scheduler, the happens-before checks and every finding are
unchanged: only the arithmetic is shared.

A grouped GEMM passes ``rows``, the rows of A that multiply the same matrix (its group): the block then spans
those rows of the aligned row block only, and B may be one matrix ``b[e]`` of a 3-d buffer [E, K, N].

Products that are not views of simulator buffers (a copy, fancy-indexed rows, a 3-d A) are computed as they are.
The kept blocks are bounded (``max_bytes``, least recently used first out). Small products run BLAS on one thread
(``matmul``).
"""
from __future__ import annotations

from typing import Iterable

import numpy as np

from .memory import Buffer

# Products below this many multiply-adds run BLAS on one thread: OpenBLAS shares a product of more than about
# 2^18 of them out to its threads, whose hand-over costs milliseconds on a loaded machine (8 ms of CPU for a
# 1024 x 32 x 32 product that one thread does in 0.05 ms); above it the threads pay.
ONE_THREAD_BELOW = 1 << 26


def _openblas_threads():
    """(get, set) of the thread count of the OpenBLAS that numpy links, or None where that is not the BLAS."""
    try:
        import ctypes
        import glob
        import os

        libs = glob.glob(os.path.join(os.path.dirname(np.__file__), os.pardir, "numpy.libs", "*openblas*"))
        for path in libs:
            lib = ctypes.CDLL(path)
            for suffix in ("64_", "_64_", ""):
                get = getattr(lib, f"scipy_openblas_get_num_threads{suffix}", None)
                put = getattr(lib, f"scipy_openblas_set_num_threads{suffix}", None)
                if get is not None and put is not None:
                    return get, put
    except OSError:
        pass
    return None


_THREADS = _openblas_threads()


def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b``, on one BLAS thread when the product is small (ONE_THREAD_BELOW)."""
    if _THREADS is None or a.ndim != 2 or b.ndim != 2 or a.shape[0] * a.shape[1] * b.shape[1] >= ONE_THREAD_BELOW:
        return a @ b
    get, put = _THREADS
    n = get()
    if n <= 1:
        return a @ b
    put(1)
    try:
        return a @ b
    finally:
        put(n)


class Sample:
    """The rows a sampled simulation computes and compares (docs/design.md, section 5): in every buffer, the rows
    whose number modulo ``period`` is one of ``residues``. Copies and tiles that move rows by multiples of the
    period keep a row in the sample, so an output row of it is computed from sampled rows only; any other move
    reads a NaN row of a product (and is then checked in full: ``run_program``)."""

    PERIOD = 128
    # each end of every 64- and 128-row tile plus the row inside it, and the middle of a 128-row tile
    EDGES = (0, 1, 2, 62, 63, 64, 65, 125, 126, 127)

    def __init__(self, seed: int, period: int = PERIOD, extra: int = 2):
        rng = np.random.default_rng([seed, 0x5A4D])
        others = [r for r in range(period) if r not in self.EDGES]
        picked = rng.choice(others, size=min(extra, len(others)), replace=False) if others else []
        self.period = period
        self.residues = np.array(sorted({e % period for e in self.EDGES} | {int(r) for r in picked}),
                                 dtype=np.int64)

    def positions(self, first: int, count: int) -> np.ndarray:
        """The sampled rows among rows [first, first + count), relative to first."""
        return np.flatnonzero(np.isin((first + np.arange(count)) % self.period, self.residues))

    def rows(self, count: int) -> np.ndarray:
        """The sampled rows of a buffer (or output) of ``count`` rows."""
        return self.positions(0, count)



def _root(x: np.ndarray):
    """The array that owns x's memory (x itself, or what numpy keeps as its base): a buffer's data and every view
    of it share it, also where the data is itself a view (an input buffer borrowing its input, memory.Buffer)."""
    return x if x.base is None else x.base

class Products:
    """The ``matmul`` provider of one simulation (``numerics.products(provider)``)."""

    def __init__(self, buffers: Iterable[Buffer], *, rows: int = 1024, max_bytes: int = 512 << 20,
                 sample: "Sample | None" = None):
        self._buffers = buffers          # a live view of the world's buffers (World.memory.values())
        self.sample = sample             # compute the blocks' sampled rows only (the others NaN), or all
        self._owners: dict[int, Buffer] = {}
        self.rows = rows
        self.max_bytes = max_bytes
        self._cache: dict[tuple, tuple[np.ndarray, int, int]] = {}
        self._bytes = 0
        self.served = 0                  # products served from a kept block
        self.computed = 0                # blocks computed
        self.direct = 0                  # products computed as given
        self.rows_computed = 0           # rows of blocks computed (a block recomputed in part counts its rows)
        self._rows: dict[int, tuple[int, np.ndarray]] = {}  # buffer uid -> (changes seen, per-row versions)

    # ------------------------------------------------------------------------------------------ operands

    def _owner(self, x: np.ndarray) -> Buffer | None:
        base = _root(x)
        buf = self._owners.get(id(base))
        if buf is None or _root(buf.data) is not base:
            self._owners = {id(_root(b.data)): b for b in self._buffers if isinstance(b, Buffer)}
            buf = self._owners.get(id(base))
        if buf is None or _root(buf.data) is not base or buf.data.ndim not in (2, 3) or \
                not buf.data.flags.c_contiguous:
            return None
        return buf

    def _locate(self, x: np.ndarray):
        """(buffer, first row, first column, transposed) of a 2-d float32 view of a buffer, else None. A
        transposed view x is buffer rows [row, row + x.shape[1]) x columns [col, col + x.shape[0]), transposed.
        A 3-d buffer [E, K, N] counts as its E*K rows of N (a view of one of its matrices, b[e], is rows
        [e K, e K + K)); rows that cross from one matrix into the next are not a view of one."""
        if x.ndim != 2 or x.dtype != np.float32 or 0 in x.shape:
            return None
        buf = self._owner(x)
        if buf is None:
            return None
        cols = buf.data.shape[-1]
        off, rem = divmod(x.__array_interface__["data"][0] - buf.data.__array_interface__["data"][0], 4)
        if rem:
            return None
        row, col = divmod(off, cols)
        if buf.data.ndim == 3:  # the rows of one matrix b[e] only, not transposed
            per = buf.data.shape[1]
            if x.strides != (cols * 4, 4) or row // per != (row + x.shape[0] - 1) // per:
                return None
            return buf, row, col, False
        if x.strides == (cols * 4, 4):
            return buf, row, col, False
        if x.strides == (4, cols * 4):
            return buf, row, col, True
        return None

    # -------------------------------------------------------------------------------------------- serving

    def _row_versions(self, buf: Buffer) -> np.ndarray:
        """Per row of a 2-d buffer: the version (count of changes) right after the last change that touched it."""
        upto, rows = self._rows.get(buf.uid, (0, None))
        if rows is None:
            rows = np.zeros(buf.data.shape[0], dtype=np.int64)
        changes = buf.changes
        for j in range(upto, len(changes)):
            lo, hi = changes[j]
            rows[lo[0]:hi[0]] = j + 1
        self._rows[buf.uid] = (len(changes), rows)
        return rows

    def __call__(self, a: np.ndarray, b: np.ndarray, rows: tuple[int, int] | None = None) -> np.ndarray:
        """``a @ b``; ``rows``: the rows of a's buffer that multiply this b (a grouped GEMM's group), within
        which a block may batch (default: all of them)."""
        la, lb = self._locate(a), self._locate(b)
        if la is None or lb is None or la[3] or la[0].data.ndim != 2 or a.shape[1] != b.shape[0]:
            self.direct += 1
            return matmul(a, b)
        abuf, ar, ak, _ = la
        bbuf, br, bc, bt = lb
        m, k = a.shape
        n = b.shape[1]
        r0 = ar - ar % self.rows
        r1 = min(r0 + self.rows, abuf.data.shape[0])
        if rows is not None:
            r0, r1 = max(r0, int(rows[0])), min(r1, int(rows[1]))
        if ar < r0 or ar + m > r1:  # the tile straddles two blocks (or leaves its rows): computed alone
            self.direct += 1
            return matmul(a, b)
        # B's block: its K steps, every column (stored [K, N]) or every row (stored [N, K], bt)
        bmat = bbuf.data if bbuf.data.ndim == 2 else bbuf.data.reshape(-1, bbuf.data.shape[-1])
        if bt:
            b_lo, b_hi = (0, bc), (bmat.shape[0], bc + k)
        elif bbuf.data.ndim == 3:  # the whole matrix b[e] of its rows
            e, per = br // bbuf.data.shape[1], bbuf.data.shape[1]
            b_lo, b_hi = (e, 0, 0), (e + 1, per, bmat.shape[1])
        else:
            b_lo, b_hi = (br, 0), (br + k, bmat.shape[1])
        key = (abuf.uid, r0, r1, ak, ak + k, bbuf.uid, bt, b_lo, b_hi)
        entry = self._cache.get(key)
        if entry is not None:
            if bbuf.changed_since(entry[2], b_lo, b_hi):
                self._drop(key)
                entry = None
            else:
                self._cache[key] = self._cache.pop(key)  # most recently used last
        versions = self._row_versions(abuf)
        b_block = None
        if entry is None:
            b_block = bmat[:, bc:bc + k].T if bt else bmat[br:br + k, :]
            block = self._rows_product(abuf.data[r0:r1, ak:ak + k], b_block, r0)
            stamps = np.full(r1 - r0, abuf.version, dtype=np.int64)
            self.computed += 1
            self.rows_computed += r1 - r0
            self._keep(key, (block, stamps, bbuf.version))
        else:
            block, stamps, _ = entry
            i0 = ar - r0
            if (versions[ar:ar + m] > stamps[i0:i0 + m]).any():
                # rows of the block written since they were computed: recompute those (the span from the first
                # to the last), the rows computed from unchanged data stay
                stale = np.flatnonzero(versions[r0:r1] > stamps)
                s0, s1 = int(stale[0]), int(stale[-1]) + 1
                b_block = bmat[:, bc:bc + k].T if bt else bmat[br:br + k, :]
                block[s0:s1] = self._rows_product(abuf.data[r0 + s0:r0 + s1, ak:ak + k], b_block, r0 + s0)
                stamps[s0:s1] = abuf.version
                self.computed += 1
                self.rows_computed += s1 - s0
        self.served += 1
        first = br if bt else bc  # the tile's columns of the block
        return block[ar - r0:ar - r0 + m, first:first + n].copy()

    def _rows_product(self, a: np.ndarray, b: np.ndarray, first: int) -> np.ndarray:
        """``a @ b`` for rows [first, first + len(a)) of A's buffer; with ``sample``, only at its rows (NaN
        elsewhere: a sampled output row that reads one of those comes out NaN, never a plausible value)."""
        if self.sample is None:
            return matmul(a, b)
        take = self.sample.positions(first, a.shape[0])
        out = np.full((a.shape[0], b.shape[1]), np.nan, dtype=np.result_type(a, b))
        if len(take):
            out[take] = matmul(a[take], b)
        return out

    def _keep(self, key: tuple, entry) -> None:
        size = entry[0].nbytes
        while self._cache and self._bytes + size > self.max_bytes:
            self._drop(next(iter(self._cache)))
        self._cache[key] = entry
        self._bytes += size

    def _drop(self, key: tuple) -> None:
        block, _, _ = self._cache.pop(key)
        self._bytes -= block.nbytes

    def clear(self) -> None:
        self._cache.clear()
        self._rows.clear()
        self._bytes = 0
