"""A model's layer stack on the devices: the derived layer program, run layer after layer with random
weights at the given sizes, then the unembedding, against symcost's prediction for the same programs.

    m = measure_model(load_model_config("llama3-8b"), hardware("my-h100.toml"), mode="decode", batch=32, seq=4096)

``decode`` runs one new token per sequence against a KV cache of ``seq`` tokens, ``prefill`` ``seq`` new
tokens attending to themselves, ``train`` the derived forward and backward einsums of each layer (the
gradients symcost derives, including those of its collectives). Each layer's output is the next layer's
input; whatever a layer produces that nothing reads (the new keys and values, the gradients) is returned,
so the compiler cannot drop the einsums that make it. The stack is the whole layer ``symcost serve`` prices:
its matmuls and its elementwise work (norms, rotary embedding as the identity, activations, residual adds),
each lowered as ``export-jax`` writes it (a backward step as its rule's gradient form or ``jax.vjp`` of
its forward).

The prediction is the derivation's: each layer's plan under the ``step`` overlap policy (its einsums one
after another, each max(T_math, T_hbm); collectives beside them), times the layers, plus the head's.
"""
from __future__ import annotations

from ..errors import UsageError
from ..export.lowering import layout_key
from ..layout import bytes_per_device
from ..models.inference import default_mesh
from ..models.transformer import head_program, layer_program, sizes
from ..program import derive_program
from . import programs, runtime
from .measure import Measurement, StepResult, predicted, time_runnable

MODES = ("decode", "prefill", "train")


class _Part:
    """One program of the stack (a layer kind or the head), compiled as a shard_map over its inputs."""

    def __init__(self, plan, jmesh, chain_in: str, chain_out: str):
        from jax.sharding import NamedSharding
        self.plan = plan
        self.low, self.names = programs.lowered(plan)
        read = {t.name for s in self.low.steps for t in s.inputs}
        self.inputs = list(self.low.inputs)
        self.x = next((i for i, t in enumerate(self.inputs) if t.name == chain_in), None)
        outs = {o.name: o for o in self.low.outputs}
        chained = outs.get(chain_out)
        if chained is not None and self.x is not None and (chained.dims, chained.axes) != (
                self.inputs[self.x].dims, self.inputs[self.x].axes):
            chained = None
        self.chained = chained is not None
        self.returned = ([chained] if chained is not None else []) + [
            o for o in self.low.outputs if o.name not in read and o.name != chain_out]
        body = programs.compile_body([self.names(layout_key(t)) for t in self.inputs], self.low.body,
                                     [self.names(layout_key(t)) for t in self.returned], plan.mesh.names)
        self.fn = runtime.sharded(body, jmesh, tuple(runtime.spec(t) for t in self.inputs),
                                  tuple(runtime.spec(t) for t in self.returned))
        self.shapes = programs.shapes(self.inputs, self.low.sizes)
        self.makers = [runtime.random_maker(sh, t.dtype, NamedSharding(jmesh, runtime.spec(t)))
                       for t, sh in zip(self.inputs, self.shapes)]

    def own_bytes(self) -> float:
        """Bytes per device of the inputs each copy of this part holds (all but the chained input)."""
        return sum(float(bytes_per_device(t, self.plan.mesh, self.low.sizes)) for i, t in enumerate(self.inputs)
                   if i != self.x)

    def args(self, key) -> list:
        jx = runtime.jax()
        out = []
        for i, make in enumerate(self.makers):
            key, sub = jx.random.split(key)
            out.append(None if i == self.x else make(sub))
        return out

    def __call__(self, x, args):
        full = [x if i == self.x else a for i, a in enumerate(args)]
        res = self.fn(*full)
        return (res[0], list(res[1:])) if self.chained else (x, list(res))


def _plans(cfg, hw, mode, batch, seq, chips, dtype, kv_dtype, efficiency=False):
    mesh, sharding = default_mesh(cfg, chips)
    t, s = (1, seq) if mode == "decode" else (seq, seq)
    kinds = [(False, cfg.dense_layers if cfg.is_moe else cfg.L)]
    if cfg.is_moe:
        kinds.append((True, cfg.L - cfg.dense_layers))
    layers = []
    for moe, count in kinds:
        if count:
            text = layer_program(cfg, sharding, dtype=dtype, kv_dtype=kv_dtype, moe=moe)
            plan = derive_program(text, mesh=mesh, dims=sizes(cfg, batch=batch, seq=t, context=s, experts_moe=moe),
                                  hw=hw, moves="all", overlap="step", backward=mode == "train",
                                  efficiency=efficiency, choose_achieved=efficiency, alternatives=False)
            layers.append((plan, count))
    head = derive_program(head_program(cfg, sharding, dtype=dtype), mesh=mesh, dims=sizes(cfg, batch=batch, seq=t,
                          context=s), hw=hw, moves="all", overlap="step", backward=mode == "train",
                          efficiency=efficiency, choose_achieved=efficiency, alternatives=False)
    return mesh, layers, head     # the plans are run and priced: their runner-ups are not kept


def measure_model(cfg, hw, *, mode: str, batch: int, seq: int, chips: int = 1, dtype: str = "bf16",
                  kv_dtype: str | None = None, layers: int | None = None, runs: int = 10, steps: bool = True,
                  seed: int = 0, efficiency: bool = False) -> Measurement:
    """Run ``cfg``'s layer stack (its first ``layers`` layers, default all) and head; see the module
    docstring. ``efficiency``: predict at the preset's achieved figures, not its peaks."""
    if mode not in MODES:
        raise UsageError(f"measure a model with one of --{', --'.join(MODES)}")
    if batch < 1 or seq < 1:
        raise UsageError("--batch and --seq must be positive")
    if hw is None:
        raise UsageError("measure compares with a prediction: give --hw (a preset, or the file symcost calibrate "
                         "wrote)")
    jx = runtime.jax()
    mesh, kinds, head_plan = _plans(cfg, hw, mode, batch, seq, chips, dtype, kv_dtype, efficiency)
    want = cfg.L if layers is None else int(layers)
    if not 1 <= want <= cfg.L:
        raise UsageError(f"--layers must be between 1 and {cfg.L}, not {want}")
    jmesh = programs.jax_mesh(head_plan.mesh)
    parts, order, left = [], [], want
    for plan, count in kinds:
        take = min(count, left)
        if take:
            parts.append(_Part(plan, jmesh, "X", "Out"))
            order += [len(parts) - 1] * take
            left -= take
    head = _Part(head_plan, jmesh, "X", "Logits")
    info = runtime.device_info()
    need = sum(parts[i].own_bytes() for i in order) + head.own_bytes()
    if info.memory and need > 0.9 * info.memory:
        raise UsageError(f"the weights and caches of {want} layers need {need / 1e9:.1f} GB per device; the device has "
                         f"{info.memory / 1e9:.1f} GB: measure fewer with --layers (the prediction counts the same "
                         f"layers) or a smaller --batch / --seq")
    key = runtime.key(seed)
    layer_args = []
    for i in order:
        key, sub = jx.random.split(key)
        layer_args.append(parts[i].args(sub))
    key, sub = jx.random.split(key)
    head_args = head.args(sub)
    first = next(p for p in parts + [head] if p.x is not None)
    key, sub = jx.random.split(key)
    x0 = first.makers[first.x](sub)

    def stack(x, layer_args, head_args):
        kept = []
        for i, args in zip(order, layer_args):
            x, extra = parts[i](x, args)
            kept += extra
        x, logits = head(x, head_args)
        return x, logits, kept
    with runtime.out_of_memory("measure fewer layers with --layers (the prediction counts the same layers) or a "
                               "smaller --batch / --seq"):
        compiled = jx.jit(stack).lower(x0, layer_args, head_args).compile()
        timing = time_runnable(programs.Runnable(compiled, (x0, layer_args, head_args), cfg.name), runs)
    pred = sum(predicted(parts[i].plan, parts[i].plan.t_step) for i in order) + predicted(head_plan, head_plan.t_step)
    serial = sum(predicted(parts[i].plan, s.seconds) for i in order for s in parts[i].plan.steps) + sum(
        predicted(head_plan, s.seconds) for s in head_plan.steps)
    per: tuple[StepResult, ...] = ()
    if steps:
        from .measure import run_steps
        first_layer = parts[order[0]]
        per = run_steps(first_layer.plan, first_layer.low, first_layer.names, jmesh, runtime.key(seed + 1), runs)
        per += run_steps(head_plan, head.low, head.names, jmesh, runtime.key(seed + 2), runs)
    what = {"kind": "model", "model": cfg.name, "mode": mode, "batch": batch, "seq": seq, "layers": want,
            "of_layers": cfg.L, "mesh": mesh, "dtype": dtype, "kv_dtype": kv_dtype or dtype,
            "bytes_per_device": need}
    return Measurement(what, timing, pred, "step", serial, info, hw.name, per,
                       head_plan.efficient and not hw.efficiency.ideal)
