"""Ulysses sequence parallelism for Gated DeltaNet layers (Qwen3.5, Qwen3.5-MoE, Qwen3-Next), exact, packed or not.

Why: DeepSpeed's Ulysses wraps only the softmax attention function. A Gated DeltaNet layer runs a causal
convolution and a gated delta-rule recurrence along the sequence inside its own forward, so under SP each
rank would run them over its shard alone, restarting state and window at the shard's start (accelerate 1.15
refuses such models under Ulysses for that reason). And even at sp=1 transformers' reference kernels run a
packed row as one sequence, carrying state from one document into the next.

How: every heads of a linear-attention layer is independent, so the layer is made Ulysses-parallel like
softmax attention. Each layer instance's class becomes a subclass whose forward (training and evaluation,
without a generation cache):
  1. runs the token-wise projections on this rank's sequence shard;
  2. one all-to-all (DeepSpeed's `_dim_zero_all_to_all`, the primitive its Ulysses attention uses) from
     sequence shards to head shards: each rank then holds the whole sequence for linear_num_key_heads / sp key
     heads, the value heads those serve (the value/key head ratio kept per rank) and their b, a gates;
  3. the causal convolution with this rank's channels of the depthwise weights, and the recurrence, over the
     whole sequence, both restarted at every packed document (longctx/training/layers/gated_deltanet.py);
  4. one all-to-all back to sequence shards before the gated norm and the output projection (token-wise).
At sp=1 the same path runs without the exchanges, which is what keeps packed documents apart there.

Which ranks form the group, and whether a forward is sharded, is read from the Ulysses attention that accelerate
registered around the model's attention (its process group and `disable_in_eval`), so the linear layers are
sharded exactly when the softmax layers are. A pre-hook on the decoder stack records, once per forward, the
whole row's position_ids (all-gathered over the group): the document layout every linear layer restarts at.
Accelerate's refusal is lifted only for a model whose every recurrent layer was converted here.
"""

import torch
import torch.distributed as dist
from torch import nn

from longctx.config.families.registry import linear_attention_classes
from longctx.config.rules.attention.linear_attention import linear_attention_problems, recurrent_layer_types
from longctx.training.attention.document_layout import DocumentLayout
from longctx.training.layers import gated_deltanet as kernels

_subclasses: dict[type, type] = {}


class ShardedRows:
    """The rows of the current forward as every linear-attention layer of one model sees them: the SP group that
    shards them (None: not sharded) and the whole rows' `DocumentLayout` (the one longctx/training/attention/
    document_layout.py computes for softmax attention), from the position_ids all-gathered over that group."""

    def __init__(self) -> None:
        self.enabled = True  # False: upstream forward (the negative control of tests and the probe)
        self.group, self.rank, self.size = None, 0, 1
        self.documents: DocumentLayout | None = None

    def update(self, position_ids: torch.Tensor | None, shape: tuple[int, int], device, group) -> None:
        """Record the layout from this rank's position_ids ([B, s], or [k, B, s] for multimodal rope)."""
        batch, local = shape
        if position_ids is None:
            position_ids = torch.arange(local, device=device).expand(batch, local)
        if position_ids.ndim == 3:
            position_ids = position_ids[0]
        position_ids = position_ids.expand(batch, -1)
        self.group, self.rank, self.size = group, 0, 1
        if group is not None:
            self.rank, self.size = dist.get_rank(group), dist.get_world_size(group)
            parts = [torch.empty_like(position_ids) for _ in range(self.size)]
            dist.all_gather(parts, position_ids.contiguous(), group=group)
            position_ids = torch.cat(parts, dim=1)
        self.documents = DocumentLayout().fill(position_ids, batch)


def ulysses_attention(config):
    """DeepSpeed's `UlyssesSPAttentionHF` that accelerate registered around this model's attention, or None.

    DeepSpeed replaces the attention function's entry with a closure over that object (`uattn_wrapper` in
    `register_with_transformers`); its `process_group` and `disable_in_eval` decide how the layers run.
    """
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    try:
        function = ALL_ATTENTION_FUNCTIONS[config._attn_implementation]
    except KeyError:
        return None
    names = getattr(getattr(function, "__code__", None), "co_freevars", ())
    return function.__closure__[names.index("uattn")].cell_contents if "uattn" in names else None


def record_layout(rows: ShardedRows):
    """A forward pre-hook for the decoder stack: the document layout (and SP group) of this forward."""

    def hook(module, args, kwargs):
        position_ids = kwargs.get("position_ids", args[2] if len(args) > 2 else None)
        reference = kwargs.get("inputs_embeds")
        reference = kwargs.get("input_ids", args[0] if args else None) if reference is None else reference
        uattn = ulysses_attention(module.config)
        sharded = uattn is not None and (module.training or not uattn.disable_in_eval)
        # the whole SP group, also under hybrid Ulysses x ring SP (training/sequence_parallel/hybrid.py)
        group = getattr(uattn, "sequence_group", uattn.process_group) if sharded else None
        rows.update(position_ids, tuple(reference.shape[:2]), reference.device, group)

    return hook


class HeadShard:
    """The channels of the token-wise projections that this rank's heads own, and the two exchanges."""

    def __init__(self, layer, size: int, rank: int):
        self.size, self.rank = size, rank
        self.k_heads, self.v_heads = layer.num_k_heads // size, layer.num_v_heads // size
        self.dk, self.dv = layer.head_k_dim, layer.head_v_dim
        self.key_dim, self.value_dim = layer.key_dim, layer.value_dim

    def channels(self, device) -> torch.Tensor:
        """Indices into the convolution's [q | k | v] channels of this rank's query, key and value heads, made on
        `device` (built on the host and copied, they would be a blocking copy per layer on a GPU)."""
        k_width, v_width = self.k_heads * self.dk, self.v_heads * self.dv
        q = torch.arange(self.rank * k_width, (self.rank + 1) * k_width, device=device)
        v = torch.arange(self.rank * v_width, (self.rank + 1) * v_width, device=device) + 2 * self.key_dim
        return torch.cat([q, q + self.key_dim, v])

    def heads(self, per_head: torch.Tensor) -> torch.Tensor:
        """This rank's slice of a per-value-head parameter (A_log, dt_bias)."""
        return per_head[self.rank * self.v_heads : (self.rank + 1) * self.v_heads]

    def to_heads(self, qkv: torch.Tensor, b: torch.Tensor, a: torch.Tensor, group) -> list[torch.Tensor]:
        """Sequence shards -> head shards in one all-to-all: (qkv [B, S, C / sp], b, a [B, S, Hv / sp])."""
        batch, local = qkv.shape[:2]
        q, k, v = qkv.split([self.key_dim, self.key_dim, self.value_dim], dim=-1)
        packed = torch.cat([t.reshape(batch, local, self.size, -1) for t in (q, k, v, b, a)], dim=-1)
        if group is not None:  # [destination rank, B, s, C_r] -> [source rank (= sequence order), B, s, C_r]
            packed = exchange(packed.permute(2, 0, 1, 3), group).permute(1, 0, 2, 3)
        packed = packed.reshape(batch, local * self.size, -1)
        k_width, v_width = self.k_heads * self.dk, self.v_heads * self.dv
        qkv, b, a = packed.split([2 * k_width + v_width, self.v_heads, self.v_heads], dim=-1)
        return [qkv, b, a]

    def to_sequence(self, core: torch.Tensor, group) -> torch.Tensor:
        """Head shards [B, S, Hv / sp, dv] -> sequence shards [B, S / sp, Hv x dv] in one all-to-all."""
        batch, length = core.shape[:2]
        if group is None:
            return core.reshape(batch, length, -1)
        local = length // self.size
        blocks = core.reshape(batch, self.size, local, -1).permute(1, 0, 2, 3)  # [destination rank, B, s, .]
        return exchange(blocks, group).permute(1, 2, 0, 3).reshape(batch, local, -1)  # heads in rank order


def exchange(blocks: torch.Tensor, group) -> torch.Tensor:
    """DeepSpeed's differentiable all-to-all over dim 0 (block i goes to rank i; the result's block j came from j)."""
    from deepspeed.sequence.layer import _dim_zero_all_to_all, register_all_to_all_group

    register_all_to_all_group(group)
    return _dim_zero_all_to_all(group, blocks.contiguous())


class SequenceParallelGatedDeltaNet:
    """Mixed in before an upstream Gated DeltaNet class: its forward, sharded by heads and restarted per document."""

    sharded_rows: ShardedRows
    reference_kernel = None  # the family's upstream torch chunked kernel (gated_deltanet.reference_kernel)

    def forward(self, hidden_states, cache_params=None, attention_mask=None, **kwargs):
        rows = self.sharded_rows
        if cache_params is not None or not rows.enabled or rows.documents is None:
            return super().forward(hidden_states, cache_params=cache_params, attention_mask=attention_mask, **kwargs)
        if attention_mask is not None:  # upstream's apply_mask_to_padding_states: padded tokens' inputs are zero
            hidden_states = (hidden_states * attention_mask[:, :, None]).to(hidden_states.dtype)
        batch, local, _ = hidden_states.shape
        qkv, z, b, a = self.project(hidden_states)
        shard = HeadShard(self, rows.size, rows.rank)
        qkv, b, a = shard.to_heads(qkv, b, a, rows.group)
        qkv = self.convolve(qkv, shard, rows.documents)
        q, k, v = qkv.split([shard.k_heads * shard.dk] * 2 + [shard.v_heads * shard.dv], dim=-1)
        length = q.shape[1]
        q, k = (t.reshape(batch, length, shard.k_heads, shard.dk) for t in (q, k))
        v = v.reshape(batch, length, shard.v_heads, shard.dv)
        g = -shard.heads(self.A_log).float().exp() * nn.functional.softplus(a.float() + shard.heads(self.dt_bias))
        core = kernels.gated_delta_rule(self.reference_kernel, q, k, v, g, b.sigmoid(), rows.documents)
        core = shard.to_sequence(core.to(hidden_states.dtype), rows.group)
        core = self.norm(core.reshape(-1, self.head_v_dim), z.reshape(-1, self.head_v_dim))
        return self.out_proj(core.reshape(batch, local, -1))

    def project(self, hidden_states):
        """Token-wise: ([q | k | v] before the convolution [B, s, C], z [B, s, Hv, dv], b, a [B, s, Hv])."""
        batch, local, _ = hidden_states.shape
        if hasattr(self, "in_proj_qkvz"):  # Qwen3-Next: interleaved per key-head group
            q, k, v, z, b, a = self.fix_query_key_value_ordering(
                self.in_proj_qkvz(hidden_states), self.in_proj_ba(hidden_states)
            )
            return torch.cat([t.reshape(batch, local, -1) for t in (q, k, v)], dim=-1), z, b, a
        z = self.in_proj_z(hidden_states).reshape(batch, local, -1, self.head_v_dim)
        return self.in_proj_qkv(hidden_states), z, self.in_proj_b(hidden_states), self.in_proj_a(hidden_states)

    def convolve(self, qkv: torch.Tensor, shard: HeadShard, layout: DocumentLayout) -> torch.Tensor:
        """This rank's channels of the depthwise causal convolution, restarted per document, then the activation
        (upstream's `causal_conv1d_fn`: computed in the weight's dtype, returned in the input's)."""
        from transformers.activations import ACT2FN

        channels = shard.channels(qkv.device)
        weight = self.conv1d.weight.squeeze(1)[channels]
        bias = None if self.conv1d.bias is None else self.conv1d.bias[channels]
        x = qkv.transpose(1, 2).to(weight.dtype)
        conv = kernels.causal_conv_restarting(x, weight, layout.doc, bias, layout.most_documents)
        out = ACT2FN[self.activation](conv)
        return out.to(qkv.dtype).transpose(1, 2)


def sequence_parallel_class(upstream: type, modeling_module) -> type:
    """The subclass of one upstream layer class (made once, so isinstance and pickling see one class)."""
    if upstream not in _subclasses:
        attrs = {"reference_kernel": staticmethod(kernels.reference_kernel(modeling_module))}
        _subclasses[upstream] = type(
            f"SequenceParallel{upstream.__name__}", (SequenceParallelGatedDeltaNet, upstream), attrs
        )
    return _subclasses[upstream]


def share_conv_weights(layer) -> None:
    """The layer's forward reads `conv1d.weight` (this rank's channels) without calling `conv1d`, so ZeRO-3 would
    leave it partitioned (an empty tensor): DeepSpeed's own API for a parameter used outside its module's forward
    makes the layer's forward gather it."""
    from deepspeed.runtime.zero.partition_parameters import register_external_parameter

    for parameter in layer.conv1d.parameters():
        register_external_parameter(layer, parameter)


def convert_layers(model, rows: ShardedRows | None = None) -> int:
    """Swap every supported Gated DeltaNet instance's class for its subclass and hook the decoder stacks that
    hold them; returns how many layers were converted (all sharing one `ShardedRows`)."""
    import sys

    rows = rows or ShardedRows()
    supported = set(linear_attention_classes().values())  # the classes the family rows name
    converted = 0
    for module in model.modules():
        upstream = type(module)
        if f"{upstream.__module__}.{upstream.__qualname__}" in supported:
            # registered in longctx/training/patches/registry.py
            module.__class__ = sequence_parallel_class(upstream, sys.modules[upstream.__module__])
            module.sharded_rows = rows
            share_conv_weights(module)
            converted += 1
    for module in model.modules():
        layers = getattr(module, "layers", None)
        if isinstance(layers, nn.ModuleList) and any(
            isinstance(m, SequenceParallelGatedDeltaNet) for m in layers.modules()
        ):
            module.register_forward_pre_hook(record_layout(rows), with_kwargs=True)
    return converted


def converted_layers(model) -> list:
    return [m for m in model.modules() if isinstance(m, SequenceParallelGatedDeltaNet)]


def set_linear_attention_sp_enabled(model, enabled: bool) -> None:
    """Switch the converted layers to upstream's forward and back (the negative control of the probe and tests)."""
    for layer in converted_layers(model):
        layer.sharded_rows.enabled = enabled


def refuse_unconverted_recurrent_layers(model) -> None:
    """accelerate's refusal of recurrent layers under Ulysses, except for a model whose every linear-attention
    layer was converted here (counted against the config's layer types)."""
    from accelerate import big_modeling

    config = getattr(model, "config", None)
    config = config.get_text_config() if hasattr(config, "get_text_config") else config
    expected = sum("linear_attention" in t for t in getattr(config, "layer_types", None) or [])
    if expected and len(converted_layers(model)) == expected:
        return
    big_modeling._refuse_recurrent_layers_under_sequence_parallelism(model)


def lift_accelerate_refusal() -> None:
    """Replace the refusal where `Accelerator._prepare_deepspeed` calls it (accelerate.accelerator's import)."""
    import accelerate.accelerator

    # registered in longctx/training/patches/registry.py
    accelerate.accelerator._refuse_recurrent_layers_under_sequence_parallelism = refuse_unconverted_recurrent_layers


def install_linear_attention_sp(model, sp: int, where: str, name: str) -> str:
    """Before accelerate prepares the model (its refusal lifted by `lift_accelerate_refusal`): refuse a recurrent
    layer type not made exact here under sp > 1 (ValueError naming it), else convert the layers; returns the
    line to print."""
    config = getattr(model, "config", None)
    config = config.get_text_config() if hasattr(config, "get_text_config") else config
    config_dict = config.to_dict() if config is not None else {}
    problems = linear_attention_problems(config_dict, sp, where, name)
    if problems:
        raise ValueError("\n  ".join(str(p) for p in problems))
    if not recurrent_layer_types(config_dict):
        return ""
    converted = convert_layers(model)
    if not converted:  # a recurrent type this repository does not convert, at sp=1: upstream runs it
        return ""
    kernel = "flash-linear-attention (cu_seqlens) on CUDA in bf16/fp16, else the torch reference per document"
    return (
        f"[linear-attention] {converted} Gated DeltaNet layers: heads split across sp={sp} by all-to-all, "
        f"recurrence and convolution restarted at every packed document ({kernel})"
    )


def enable_linear_attention_sp(model, recipe, sp: int) -> str:
    """The one call of the trainer (per model) and of the eval worker (before accelerate prepares the model):
    install on `model`; returns the line to print, raises a refusal as a RecipeError naming the recipe."""
    from longctx.config.recipe import RecipeError

    name = getattr(getattr(model, "config", None), "name_or_path", "") or type(model).__name__
    try:
        return install_linear_attention_sp(model, sp, recipe.accelerate_config, name)
    except ValueError as exc:
        raise RecipeError(recipe.config_source, [str(exc)]) from None
