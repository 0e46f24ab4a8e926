"""The CPU backend's fast paths, in one place (benchmarks/PROFILE_NOTES.md).

XLA's CPU backend runs a product fast (YNNPACK) only when it is row-major, and fuses small tables
and transposes into loops that cost more than they save. These modules lay the training step out
for it: `dense` (x W with a row-major weight gradient), `products` (attention's two products with
row-major backward passes), `boundary` (an array computed as an op of its own), `rows` (a softmax
or a norm computed without its input's size-1 axes, which YNNPACK reduces slowly) and `backward`
(the custom-VJP shape both products take: a product that rounds its inputs itself). Nothing here is
read from a global: the model's dense layers take `dense` on a CPU backend with any `model.kernel`
but `reference` (ModelConfig.cpu_ops), and the attention's `cpu` kernel (attention/kernels/cpu.py)
uses the rest; `reference` traces the plain einsums they replace, which is what the tests compare
them with.
"""
