"""Copy regions as the driver's copies take them: a region of a tensor view as rows of one pitch (the eager
plans' C path copies them with cuMemcpyDtoDAsync / cuMemcpy2DAsync, runtime/hotpath.c). Imports nothing."""
from __future__ import annotations

MAX_PITCH = (1 << 31) - 1  # the bytes between rows a 2-D driver copy takes (CU_DEVICE_ATTRIBUTE_MAX_PITCH)


def copy_rows(sizes: tuple[int, ...], strides: list[tuple[int, ...]], elem_bytes: int):
    """A copy of a region of ``sizes`` between views of ``strides`` (elements; the source's, then the
    destination's) as rows: (width bytes, height, (source pitch, destination pitch) in bytes), or None where a
    view's region is not height rows of one pitch. The trailing dims both views hold densely make a row; of the
    dims before them, at most one may be longer than 1 (the rows)."""
    n = len(sizes)
    k = n
    for st in strides:  # the trailing dims dense in this view: each one's stride the product of those after it
        dense, run = 0, 1
        for d in range(n - 1, -1, -1):
            if sizes[d] != 1 and st[d] != run:
                break
            run *= sizes[d]
            dense += 1
        k = min(k, dense)
    width = elem_bytes
    for d in range(n - k, n):
        width *= sizes[d]
    outer = [d for d in range(n - k) if sizes[d] != 1]
    if not outer:
        return width, 1, (width, width)
    if len(outer) > 1:
        return None
    d = outer[0]
    pitches = tuple(st[d] * elem_bytes for st in strides)
    if any(p < width or p > MAX_PITCH for p in pitches):
        return None
    return width, sizes[d], pitches


__all__ = ["MAX_PITCH", "copy_rows"]
