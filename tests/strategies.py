"""Hypothesis strategies for small, valid specs covering every option, and workloads to run them on."""

from hypothesis import strategies as st

from tfcalc import ModelSpec, Workload


@st.composite
def specs(draw, max_layers: int = 3, max_heads: int = 4, max_d_head: int = 8, max_seq: int = 12,
          moe: bool | None = None, encoder_decoder: bool | None = None, qk_and_sandwich_norms: bool = False) -> ModelSpec:
    """`qk_and_sandwich_norms`: also draw qk_norm and the sandwich and output norm positions (their reference
    modules need tfcalc.verify.components' rules for `attention.q_norm` and `*_post_norm` before `check` maps them)."""
    n_kv_heads = draw(st.integers(1, max_heads))
    n_heads = n_kv_heads * draw(st.integers(1, max(1, max_heads // n_kv_heads)))
    d_head = draw(st.integers(1, max_d_head))
    own_d_model = draw(st.booleans())
    d_model = draw(st.integers(2, 32)) if own_d_model else n_heads * d_head
    positions = draw(st.sampled_from(["learned", "sinusoidal", "rotary", "relative", "alibi", "none"]))
    seq_len = draw(st.integers(1, max_seq))
    is_moe = draw(st.booleans()) if moe is None else moe
    is_encdec = draw(st.booleans()) if encoder_decoder is None else encoder_decoder
    n_layers = draw(st.integers(1, max_layers))
    fields = dict(
        n_layers=n_layers, d_model=d_model, n_heads=n_heads, n_kv_heads=n_kv_heads,
        d_head=d_head, d_ff=draw(st.integers(1, 40)), vocab_size=draw(st.integers(1, 64)), seq_len=seq_len,
        batch_size=draw(st.integers(1, 3)), mlp=draw(st.sampled_from(["standard", "gated"])),
        activation=draw(st.sampled_from(["gelu", "gelu_tanh", "relu", "silu"])),
        norm=draw(st.sampled_from(["layernorm", "rmsnorm", "layernorm_no_bias"])),
        norm_position=draw(st.sampled_from(["pre", "post"])),
        final_norm=draw(st.booleans()), bias=draw(st.booleans()), qkv_bias=draw(st.none() | st.booleans()),
        mlp_bias=draw(st.none() | st.booleans()),
        tie_embeddings=draw(st.booleans()), lm_head=draw(st.booleans()), positions=positions,
        embedding_norm=draw(st.booleans()), causal=True,
    )
    if qk_and_sandwich_norms:
        fields["norm_position"] = draw(st.sampled_from(["pre", "post", "sandwich", "output"]))
        if not is_encdec:
            fields["qk_norm"] = draw(st.sampled_from(["none", "head", "per_head", "full"]))
    if fields["norm_position"] == "pre" and not is_encdec:
        fields["parallel_block"] = draw(st.sampled_from(["none", "one_norm", "two_norms"]))
    if positions == "rotary" and draw(st.booleans()):
        fields["rotary_dim"] = draw(st.integers(1, d_head))
    if fields["lm_head"] and not fields["tie_embeddings"]:
        fields["head_bias"] = draw(st.booleans())
    if not is_encdec:
        fields["attention_sinks"] = draw(st.booleans())
    if is_encdec:
        fields |= dict(n_encoder_layers=draw(st.integers(1, max_layers)), shared_embeddings=draw(st.booleans()))
    else:
        fields |= dict(n_token_types=draw(st.integers(0, 3)), pooler=draw(st.booleans()),
                       causal=draw(st.booleans()))
    if fields["causal"] and draw(st.booleans()):
        fields["sliding_window"] = draw(st.integers(1, 2 * max_seq))
        layout = draw(st.sampled_from(["all", "last", "pattern"]))
        if layout == "last":
            fields["sliding_window_layers"] = draw(st.integers(0, n_layers))
        elif layout == "pattern":
            fields["attention_pattern"] = draw(st.lists(st.sampled_from(["local", "global"]), min_size=1,
                                                        max_size=4))
    if positions == "learned":
        fields["max_positions"] = seq_len + draw(st.integers(0, 4))
    if positions == "relative":
        fields["relative_attention_buckets"] = draw(st.integers(1, 8))
    if is_moe:
        n_experts = draw(st.integers(2, 6))
        n_shared = draw(st.integers(0, 2))
        fields |= dict(n_experts=n_experts, top_k=draw(st.integers(1, n_experts)), n_shared_experts=n_shared,
                       d_expert=draw(st.integers(1, 24)), d_shared_expert=draw(st.integers(1, 24)),
                       shared_expert_gate=n_shared > 0 and draw(st.booleans()), router_bias=draw(st.booleans()),
                       first_dense_layers=draw(st.integers(0, n_layers)), moe_every=draw(st.integers(1, 3)))
    if not is_encdec and not is_moe and "sliding_window" not in fields and draw(st.booleans()):
        fields["shared_blocks"] = draw(st.integers(1, n_layers))  # ALBERT's shared parameters
    if not is_encdec and not fields["lm_head"] and draw(st.booleans()):
        fields["d_embedding"] = draw(st.integers(1, 16))  # ALBERT's factorised embedding
    if (positions == "rotary" and not is_encdec and fields.get("qk_norm", "none") == "none"
            and fields.get("parallel_block", "none") == "none" and not fields.get("attention_sinks")
            and "shared_blocks" not in fields and "d_embedding" not in fields and draw(st.booleans())):
        # multi-head latent attention (DeepSeek): d_head, n_kv_heads and rotary_dim follow from its own widths
        for derived in ("d_head", "n_kv_heads", "rotary_dim"):
            fields.pop(derived, None)
        fields |= dict(kv_lora_rank=draw(st.integers(1, 12)), q_lora_rank=draw(st.none() | st.integers(1, 12)),
                       qk_nope_dim=draw(st.integers(1, 6)), qk_rope_dim=2 * draw(st.integers(1, 3)),
                       v_head_dim=draw(st.integers(1, 6)))
    if (not is_encdec and fields.get("parallel_block", "none") == "none" and "shared_blocks" not in fields
            and draw(st.booleans())):
        # the stack as a pattern of block kinds: attention or an MLP alone, or both (the experts where it has some)
        ffn = "moe" if is_moe else "mlp"
        blocks = draw(st.lists(st.sampled_from(["attention", f"attention+{ffn}", ffn, "mlp", "attention+mlp"]),
                               min_size=1, max_size=4))
        fields["block_pattern"] = blocks if not is_moe or any("moe" in b for b in blocks) else [*blocks, "moe"]
        present = fields["block_pattern"][:fields["n_layers"]]
        if positions == "relative" and not any("attention" in b for b in present):
            fields["block_pattern"] = ["attention", *fields["block_pattern"]]  # T5's bias needs scores to add to
        if is_moe:  # the pattern says which blocks are MoE
            fields |= dict(first_dense_layers=0, moe_every=1)
    return ModelSpec(**fields)


@st.composite
def workloads(draw, spec: ModelSpec, max_len: int = 12) -> Workload:
    """A train, prefill or decode workload that `spec` can run (learned positions bound the keys)."""
    phase = draw(st.sampled_from(["train", "prefill", "decode"] if spec.causal else ["train"]))
    limit = spec.max_positions if spec.positions == "learned" else max_len
    seq_len = 1 if phase == "decode" else draw(st.integers(1, min(limit, max_len)))
    context = 0 if phase == "train" else draw(st.integers(0, limit - seq_len))
    src_len = draw(st.integers(1, min(limit, max_len))) if spec.is_encoder_decoder else None
    return Workload(phase=phase, batch_size=draw(st.integers(1, 3)), seq_len=seq_len, context=context,
                    src_len=src_len)
