"""ModelSpec: the flat, friendly description of a transformer (flags, presets, TOML) that compiles into the
stacks of layers the inventory is built from (`tfcalc.arch`).

Optional sizes (d_head, n_kv_heads, d_ff, d_expert, d_shared_expert) default to values derived from the
others. The spec remembers which fields were given, so that changing one field (`spec.replace(d_model=1024)`)
re-derives the defaults of the others instead of keeping stale values.

seq_len and batch_size are the spec's default workload, not part of the model: parameters never depend on
them. A learned position table's size (max_positions) is part of the model: when a spec leaves it out, it is
taken from the seq_len the spec was written with, once, and a later workload does not change it.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .sizes import Count, Size


class Connector(BaseModel):
    """A piece of a multimodal model between its towers (a projector, a pooled output's projection, a lone scalar),
    counted beside them. It reads `source`'s output: every token of each image (or audio clip), or with `pooled` the
    one pooled vector per image (per text, with source='text'); drops the class token first where the model does;
    averages `pool` tokens into one (no parameters: Gemma 3's 4x4 average pool); concatenates `merge` tokens into one
    (a pixel shuffle: widths[0] is merge x the tower's width); applies a norm over widths[0]; then linears between
    consecutive `widths` with `activation` between them. `scalars`: lone parameters (CLIP's logit_scale).
    A connector of a tower's every token (not pooled) feeds the language model: its output tokens are among the text
    tower's tokens (an image's tokens in the prompt)."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    name: str = Field(description="Its component (projector, visual_projection, logit_scale).")
    source: Literal["vision", "audio", "text"] = Field("vision", description="The tower whose output it reads.")
    pooled: bool = Field(False, description="Reads each image's (text's) one pooled vector, not its every token.")
    drop_class_token: bool = Field(False, description="Drops the class token before reading the tokens.")
    pool: Size = Field(1, description="Tokens averaged into one before it (no parameters).")
    merge: Size = Field(1, description="Tokens concatenated into one before it (a pixel shuffle).")
    norm: Literal["none", "layernorm", "rmsnorm"] = Field("none", description="A norm over widths[0] first.")
    norm_weight: bool = Field(True, description="The norm has a learned weight (false: Gemma 4's weightless "
                                                "RMSNorm, no parameters).")
    norm_before_merge: bool = Field(False, description="The norm reads each of the tower's tokens before `merge` "
                                                       "concatenates them, over the tower's width (Mistral 3's "
                                                       "projector: its norm, then its patch merger).")
    merge_linear: bool = Field(False, description="A linear without a bias right after the merge, from merge x the "
                                                  "tower's width back to the tower's width, widths[0] (Mistral 3's "
                                                  "patch merger, merging_layer); then the linears of widths.")
    widths: list[Size] = Field([], description="Widths in, between and out: a linear between each two.")
    bias: bool = Field(False, description="Biases on its linears.")
    activation: Literal["gelu", "gelu_tanh", "relu", "silu"] = Field(
        "gelu", description="Between its linears.")
    scalars: Count = Field(0, description="Lone parameters (logit_scale, logit_bias).")
    image_size: Size | None = Field(None, description="The one image size it reads (Gemma 3's projector reshapes "
                                                      "its input to the config's patch grid); None: any.")
    similarity: Size | None = Field(None, description="A dual encoder's logits: every image's embedding against every "
                                                      "text's, [images, similarity] @ [similarity, texts] (no "
                                                      "weights). Not with widths.")
    cross_attended: bool = Field(False, description="Its outputs are what the language model's cross-attention "
                                                    "blocks attend to (Llama 3.2 Vision), not tokens of the prompt: "
                                                    "each sequence's keys are its images' rows (images / batch_size "
                                                    "images per sequence).")

    @property
    def tower_width(self) -> int:
        """The width of each token it reads from its tower (widths[0], or widths[0] / merge after a pixel shuffle)."""
        return self.widths[0] if self.merge_linear else self.widths[0] // self.merge

    @property
    def into_text(self) -> bool:
        """Its outputs are tokens of the language model (an image's tokens in the prompt): a connector of a tower's
        every token, with linears or without (a tower whose own output is the prompt's tokens: Qwen2-VL's merger)."""
        return self.source != "text" and not self.pooled and self.similarity is None and not self.cross_attended


class ModelSpec(BaseModel):
    """A decoder-only, encoder-only or encoder-decoder transformer, by its sizes and architectural choices.

    >>> spec = ModelSpec(n_layers=12, d_model=768, n_heads=12, vocab_size=50257, seq_len=1024)
    >>> spec.d_head, spec.d_ff, spec.n_kv_heads, spec.max_positions
    (64, 3072, 12, 1024)
    >>> spec.replace(d_model=1024, n_heads=16).d_ff
    4096
    >>> spec.replace(seq_len=512).max_positions  # the table is the model's; seq_len is the workload
    1024
    """

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    name: str | None = Field(None, description="Label shown in tables.")

    # sizes
    n_layers: Size = Field(description="Transformer blocks (L); the decoder's, in an encoder-decoder.")
    n_encoder_layers: Count = Field(0, description="Encoder blocks of an encoder-decoder (0: decoder- or "
                                                   "encoder-only). Each decoder block then has cross-attention.")
    d_model: Size = Field(description="Residual stream width (D).")
    n_heads: Size = Field(description="Query heads (H).")
    d_head: Size | None = Field(None, description="Width of one head; default d_model / n_heads.")
    n_kv_heads: Size | None = Field(
        None, description="Key/value heads; default n_heads (MHA). Must divide n_heads (GQA, MQA)."
    )
    d_ff: Size | None = Field(None, description="MLP hidden width; default 4 * d_model.")
    vocab_size: Size | None = Field(None, description="Vocabulary size (V). Required of a model of tokens (and of "
                                                      "audio: its decoder's); a model of images (inputs='images') "
                                                      "has none.")
    seq_len: Size = Field(description="Tokens per sequence (N).")
    batch_size: Size = Field(1, description="Sequences per step (B).")

    # block structure
    mlp: Literal["standard", "gated"] = Field(
        "standard", description="standard: up, act, down. gated (SwiGLU/GeGLU): act(gate) * up, down."
    )
    activation: Literal["gelu", "gelu_tanh", "relu", "silu", "quick_gelu"] = Field(
        "gelu", description="MLP activation (for gated MLPs, applied to the gate); quick_gelu: x * sigmoid(1.702 x) "
                            "(CLIP, Qwen2-VL's vision tower)."
    )
    norm: Literal["layernorm", "rmsnorm", "layernorm_no_bias"] = Field(
        "layernorm", description="layernorm (weight and bias), rmsnorm (weight) or layernorm_no_bias (a LayerNorm "
                                 "with a weight and no bias: MPT's no_bias, Cohere)."
    )
    norm_position: Literal["pre", "post", "sandwich", "output"] = Field(
        "pre", description="Where each sublayer's norms are: pre (x + f(norm(x))), post (norm(x + f(x)), BERT), "
                           "sandwich (x + norm(f(norm(x))), Gemma 2 and 3: a norm before and one after each "
                           "sublayer) or output (x + norm(f(x)), OLMo 2: only the norm of the sublayer's output)."
    )
    qk_norm: Literal["none", "head", "per_head", "full"] = Field(
        "none", description="A norm (of kind `norm`) on the queries and keys after their projection, before rotary: "
                            "head (each head's d_head channels, one weight [d_head] for q and one for k; Qwen3, "
                            "Gemma 3), per_head (each head's d_head channels with weights of its own, [H, d_head] "
                            "for q and [Hkv, d_head] for k; Cohere's use_qk_norm) or full (all of q, [H * d_head], "
                            "and all of k, [Hkv * d_head]; OLMo 2)."
    )
    parallel_block: Literal["none", "one_norm", "two_norms"] = Field(
        "none", description="Attention and MLP side by side on the block's input, both added to the residual: "
                            "one_norm: x + attn(norm(x)) + mlp(norm(x)), one norm shared (GPT-J, Phi, Falcon-7B, "
                            "Cohere); two_norms: x + attn(norm1(x)) + mlp(norm2(x)) (GPT-NeoX, Falcon-40B). "
                            "none: the MLP after attention. Only with norm_position pre."
    )
    attention_sinks: bool = Field(
        False, description="A learned logit per query head in each self-attention block (gpt-oss's sinks): a "
                           "column of the softmax that takes probability mass and mixes no value; H parameters "
                           "per block, no matmul."
    )
    attention_gate: bool = Field(
        False, description="Qwen3-Next: the query projection is doubled; a sigmoid of the second half gates the "
                           "attention output, before out"
    )
    final_norm: bool = Field(True, description="A norm after the last block.")
    pooled_final_norm: bool = Field(
        False, description="The final norm normalises only each sequence's first token, the one the head pools "
                           "(CLIP's vision post_layernorm on the class token): its parameters as ever, its work over "
                           "batch_size rows. Only with final_norm and without an LM head.")
    bias: bool = Field(True, description="Biases on the attention output (and, by default, q/k/v and MLP) linears.")
    qkv_bias: bool | None = Field(None, description="Biases on q, k, v; default: same as bias (Qwen2: true).")
    k_bias: bool = Field(True, description="With biases on q, k, v: one on the key projection too (self- and "
                                           "cross-attention); false: q and v only (Whisper's k_proj has none).")
    mlp_bias: bool | None = Field(None, description="Biases on the MLP and expert linears; default: same as bias.")
    tie_embeddings: bool = Field(True, description="LM head shares the token embedding matrix.")
    lm_head: bool = Field(True, description="A vocabulary projection at the end (false for a bare encoder).")
    embedding_rows: Size | None = Field(
        None, description="Rows of the token table when they are not vocab_size (Llama 3.2 Vision's language model: "
                          "vocab_size + 8); the LM head keeps vocab_size outputs. Only with an untied head, in a "
                          "decoder- or encoder-only model. None: vocab_size.")
    head_bias: bool = Field(False, description="A bias [V] on the untied LM head (GPT-J, Phi).")

    # positions
    positions: Literal["learned", "sinusoidal", "rotary", "relative", "alibi", "none"] = Field(
        "learned", description="Position encoding (relative: T5's bucketed bias, a table in each stack's first "
                               "block; alibi: Press et al.'s fixed per-head linear bias on the scores, no "
                               "parameters: BLOOM, MPT)."
    )
    rotary_dim: Size | None = Field(
        None, description="Channels of each query and key head that rotary rotates (partial rotary: GPT-J's "
                          "rotary_dim, GPT-NeoX's rotary_pct, Phi's partial_rotary_factor); default all of d_head. "
                          "No parameters; what training keeps of rotary (its cos/sin tables) scales with it. Only "
                          "for rotary positions."
    )
    max_positions: Size | None = Field(
        None, description="Rows of the learned position table (part of the model); default: the seq_len the "
                          "spec is written with. Only for learned positions."
    )
    relative_attention_buckets: Size | None = Field(
        None, description="Buckets of T5's relative position bias (default 32). Only for relative positions."
    )
    sliding_window: Size | None = Field(
        None, description="Causal attention window (Mistral, Qwen2, Gemma). forward stays full N x N; the "
                          "windowed figure is reported beside it."
    )
    sliding_window_layers: Count | None = Field(
        None, description="How many blocks use the window (the last ones); default all, unless "
                          "attention_pattern says which."
    )
    attention_pattern: list[Literal["global", "local", "chunked"]] | None = Field(
        None, description="Per-block attention, cycled over the blocks: local uses sliding_window, chunked "
                          "attention_chunk_size, global sees every key. Gemma 3: five local then one global; Llama 4: "
                          "three chunked then one global."
    )
    attention_chunk_size: Size | None = Field(
        None, description="Chunked attention (Llama 4): a query sees only the keys of its own chunk of this many "
                          "positions (positions c * size .. (c + 1) * size - 1), causally, in the blocks "
                          "attention_pattern marks chunked (every block when there is no pattern). forward stays "
                          "full N x N; the windowed figure keeps the chunks' pairs."
    )
    rotary_layers: list[bool] | None = Field(
        None, description="Per block, cycled over the blocks: whether rotary turns its queries and keys (false: a "
                          "NoPE block, Llama 4's no_rope_layers). No parameters and no matmul either way; training "
                          "keeps no cos/sin tables when no block has rotary. None: every block. Only for rotary "
                          "positions."
    )

    # global blocks of their own shape (Gemma 4)
    global_d_head: Size | None = Field(
        None, description="Head width of the global blocks (those without a sliding window; every block when there "
                          "is none) when it is not d_head (Gemma 4's global_head_dim): their q, k, v and output "
                          "projections, q/k norms, scores, values and KV cache that wide. Default d_head."
    )
    global_n_kv_heads: Size | None = Field(
        None, description="Key/value heads of the global blocks (Gemma 4's num_global_key_value_heads); default "
                          "n_kv_heads. Must divide n_heads."
    )
    global_k_eq_v: bool = Field(
        False, description="The global blocks have no value projection: their values are the key projection's "
                           "output, before the key norm and rotary (Gemma 4's attention_k_eq_v)."
    )

    # per-layer embeddings and blocks that share keys and values (Gemma 4 E2B, E4B)
    d_per_layer_input: Size | None = Field(
        None, description="Per-layer embeddings (Gemma 4's hidden_size_per_layer_input, P): a table per_layer_vocab x "
                          "n_layers * P looked up by the tokens, a projection d_model -> n_layers * P of the embedded "
                          "tokens and an RMS norm [P] over each block's slice; in each block, after the MLP, a gate "
                          "d_model -> P, the activation, times the block's slice, a projection P -> d_model and a norm "
                          "[d_model], added to the residual stream. None: none."
    )
    per_layer_vocab: Size | None = Field(
        None, description="Rows of the per-layer embedding table (Gemma 4's vocab_size_per_layer_input); default "
                          "vocab_size. Only with d_per_layer_input."
    )
    kv_shared_layers: Count = Field(
        0, description="The last this many blocks compute no keys or values: each attends with those of the last "
                       "earlier block of its kind, local or global (Gemma 4's num_kv_shared_layers): no key or value "
                       "projection, no key norm, nothing added to the KV cache."
    )
    kv_shared_d_ff: Size | None = Field(
        None, description="MLP width of the blocks that share keys and values (Gemma 4's use_double_wide_mlp: 2 * "
                          "d_ff); default d_ff. Only with kv_shared_layers."
    )

    # parameter sharing (ALBERT)
    d_embedding: Size | None = Field(
        None, description="A factorised embedding (ALBERT's embedding_size): the token, position and token-type "
                          "tables and the embedding norm are this wide, and a projection d_embedding -> d_model "
                          "(with bias) follows them. None: the tables are d_model wide."
    )
    shared_blocks: Size | None = Field(
        None, description="Blocks share parameters: this many sets of block parameters, block i using set "
                          "int(i / (n_layers / shared_blocks)) (ALBERT's num_hidden_groups; 1: every block the same "
                          "weights). Parameters are counted once per set, FLOPs once per block. None: every block "
                          "its own."
    )

    # encoder extras (BERT)
    n_token_types: Count = Field(0, description="Token-type (segment) embeddings; BERT: 2.")
    embedding_norm: bool = Field(False, description="A norm right after the embeddings (BERT).")
    pooler: bool = Field(False, description="BERT pooler: dense D->D (d_pooler) with tanh on the first token.")
    d_pooler: Size | None = Field(None, description="The pooler's output width (ViT's pooler_output_size); default "
                                                    "d_model. Only with pooler.")
    d_projection: Size | None = Field(
        None, description="A projection of the pooled token's final state d_model -> d_projection (CLIP's "
                          "visual_projection and text_projection, SigLIP's text head), one row per sequence. None: "
                          "none. Only without an LM head.")
    projection_bias: bool = Field(False, description="A bias on the projection (SigLIP's text head: true; CLIP's "
                                                     "projections: false). Only with d_projection.")
    attention_pool: bool = Field(
        False, description="An attention-pooling head after the final norm (SigLIP's vision head, transformers' "
                           "SiglipMultiheadAttentionPoolingHead): a learned probe [1, 1, d_model] attends with n_heads "
                           "heads to the stack's tokens (torch's MultiheadAttention: q, k, v and out, d_model wide, "
                           "with biases), then a norm and an MLP (d_ff, with biases) with a residual add; one pooled "
                           "row per sequence. Only without an LM head.")
    n_classes: Size | None = Field(
        None, description="A classifier on the first token's final state (the class token: "
                          "ViTForImageClassification): [d_model, n_classes] with a bias. None: none. Only without an "
                          "LM head.")

    # images (ViT): the stack reads patches of images, not tokens; audio (Whisper): the encoder reads mel frames
    inputs: Literal["tokens", "images", "audio"] = Field(
        "tokens", description="What the model reads: tokens (a token table), images (a patch embedding: each "
                              "image cut into patch_size x patch_size patches, each patch projected to d_model, a "
                              "class token before them and a learned position table added; sizes under "
                              "kinds.patch_embedding; no vocabulary, no LM head) or audio (an encoder-decoder whose "
                              "encoder reads a log-mel spectrogram through two convolutions and a position table, "
                              "Whisper's; sizes under kinds.audio_conv; its decoder reads tokens; with "
                              "n_encoder_layers=0 the encoder alone, a multimodal model's audio tower: no vocabulary, "
                              "no LM head).")
    causal: bool = Field(True, description="Causal (decoder) attention; false for a bidirectional encoder.")

    # mixture of experts
    n_experts: Size = Field(1, description="Routed experts per MoE layer; 1 means a dense MLP.")
    top_k: Size = Field(1, description="Routed experts each token goes through.")
    n_shared_experts: Count = Field(0, description="Experts every token goes through.")
    d_expert: Size | None = Field(None, description="Hidden width of one routed expert; default d_ff.")
    d_shared_expert: Size | None = Field(None, description="Hidden width of one shared expert; default d_expert.")
    shared_expert_gate: bool = Field(False, description="A sigmoid gate D->1 on the shared experts (Qwen2-MoE).")
    router_bias: bool = Field(False, description="A bias on the router's linear, one per expert (gpt-oss).")
    d_moe_latent: Size | None = Field(
        None, description="The routed experts' input and output width: a projection d_model -> d_moe_latent before "
                          "them and d_moe_latent -> d_model after (Nemotron 3's moe_latent_size); the router and the "
                          "shared experts read the block's input. None: the experts read d_model.")
    first_dense_layers: Count = Field(0, description="MoE models: the first k blocks have a dense MLP of width "
                                                     "d_ff (DeepSeek's first_k_dense_replace).")
    moe_beside_mlp: bool = Field(
        False, description="Each MoE block keeps its dense MLP (d_ff wide) and runs the experts beside it, on the "
                           "same input, the two outputs summed (Gemma 4's enable_moe_block): a norm before and one "
                           "after each branch (mlp/norm, mlp/branch_norm; moe/norm, moe/post_norm), the sum's norm "
                           "(mlp/post_norm), and a router on the block's residual stream through an RMS norm without "
                           "weight, with a scale [d_model] and a scale per expert [n_experts]. Only with "
                           "norm_position sandwich."
    )
    moe_every: Size = Field(1, description="MoE models: block i (from 0) is MoE when (i + 1) % moe_every == 0 "
                                           "(Qwen2-MoE's decoder_sparse_step); the others are dense.")
    block_pattern: list[str] | None = Field(
        None, description="The stack's blocks as block kinds joined by '+', cycled over the blocks: 'attention+mlp' "
                          "(the default block), 'attention+moe', 'attention' (attention alone), 'mlp' or 'moe' (alone: "
                          "Nemotron-H's MLP layers); each kind with its own norms and residual add. None: attention "
                          "and, by moe_every and first_dense_layers, the MLP or the experts in every block."
    )
    kinds: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="Each block kind's own sizes, grouped under the kind's name (TOML: a [kinds.conv] table; JSON: "
                    "{\"kinds\": {\"conv\": {\"kernel\": 3}}}), validated by the kind's own model (docs/architecture.md); "
                    "`spec.sizes(kind)` reads them, with the kind's defaults. Only for kinds the block_pattern uses.")

    # multi-head latent attention (DeepSeek-V2, V3): set by kv_lora_rank; see docs/formulas.md
    kv_lora_rank: Size | None = Field(
        None, description="Multi-head latent attention (MLA; DeepSeek-V2, V3): keys and values come from a latent of "
                          "this width per token (kv_a: D -> kv_lora_rank + qk_rope_dim, an RMS/layer norm over the "
                          "latent, kv_b: kv_lora_rank -> H * (qk_nope_dim + v_head_dim)); the KV cache keeps the "
                          "latent and the shared rotary key (kv_lora_rank + qk_rope_dim per token and layer). "
                          "None: ordinary attention."
    )
    q_lora_rank: Size | None = Field(
        None, description="MLA: queries through a low-rank latent (q_a: D -> q_lora_rank, a norm, q_b: q_lora_rank -> "
                          "H * (qk_nope_dim + qk_rope_dim)); None: one projection D -> H * (qk_nope_dim + qk_rope_dim)."
    )
    qk_nope_dim: Size | None = Field(None, description="MLA: channels of each query and key head without rotary "
                                                       "(DeepSeek's qk_nope_head_dim). Required with kv_lora_rank.")
    qk_rope_dim: Size | None = Field(None, description="MLA: rotary channels of each query head and of the one key "
                                                       "all heads share (qk_rope_head_dim). Required with "
                                                       "kv_lora_rank.")
    v_head_dim: Size | None = Field(None, description="MLA: width of each value head (v_head_dim). Required with "
                                                      "kv_lora_rank.")
    index_n_heads: Size | None = Field(
        None, description="MLA with a sparse-attention indexer (DeepSeek-V3.2's DSA): its heads. The indexer scores "
                          "every (query, key) pair: wq_b q_lora_rank -> index_n_heads * index_head_dim, wk D -> "
                          "index_head_dim with a layer norm, weights_proj D -> index_n_heads; the keys it picks are "
                          "the only ones attention keeps (an eager model masks the others). Needs q_lora_rank and "
                          "index_head_dim.")
    index_head_dim: Size | None = Field(None, description="MLA's indexer: the width of its query heads and of its one "
                                                          "key per token (cached beside the latent).")
    index_topk: Size | None = Field(None, description="MLA's indexer: the keys each query keeps (the reference model "
                                                      "masks the others, as an eager model does: the same FLOPs). "
                                                      "Default with the indexer: 2048 (DeepSeek-V3.2's).")

    # multimodal: the other towers beside this one (the language model, or CLIP's text tower)
    towers: dict[Literal["vision", "audio"], ModelSpec] = Field(
        {}, description="The model's other towers, each a model of its own (a vision encoder: inputs='images'), counted "
                        "beside this one, which is the text tower. Their components are named under the tower "
                        "(vision/attention/qkv).")
    connectors: list[Connector] = Field([], description="What joins the towers: projectors, pooled outputs' "
                                                        "projections, lone scalars (Connector).")

    # encoder-decoder
    shared_embeddings: bool = Field(True, description="Encoder and decoder share one token embedding "
                                                      "(encoder-decoder only).")

    @model_validator(mode="wrap")
    @classmethod
    def _vocabulary(cls, data: Any, handler):
        """vocab_size is required of a model of tokens (inputs='tokens', the default) and of audio with a decoder (its
        decoder's; an audio encoder alone, a multimodal model's audio tower, has none):
        named with the other missing fields, in the fields' order, as pydantic names a required field."""
        if not (isinstance(data, dict) and data.get("vocab_size") is None
                and (data.get("inputs", "tokens") == "tokens"
                     or (data.get("inputs") == "audio" and data.get("n_encoder_layers", 0) != 0))):
            return handler(data)
        from pydantic import ValidationError

        missing = {"type": "missing", "loc": ("vocab_size",), "input": data}
        try:
            handler(data)
        except ValidationError as e:
            errors = [{k: err[k] for k in ("type", "loc", "input", "ctx") if k in err} for err in e.errors()]
        else:
            errors = []
        order = list(cls.model_fields)

        def place(err: dict) -> int:
            return order.index(err["loc"][0]) if err["loc"] and err["loc"][0] in order else len(order)

        errors = sorted([*errors, missing], key=place)
        raise ValidationError.from_exception_data(cls.__name__, errors)

    @model_validator(mode="after")
    def _derive_and_check(self) -> ModelSpec:
        problems: list[str] = []
        self._check_mla(problems)  # first: MLA derives d_head (qk_nope_dim + qk_rope_dim)
        if self.d_head is None:
            if self.d_model % self.n_heads:
                problems.append(
                    f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}; give d_head"
                )
            else:
                self._set("d_head", self.d_model // self.n_heads)
        if self.n_kv_heads is None:
            self._set("n_kv_heads", self.n_heads)
        elif self.n_heads % self.n_kv_heads:
            problems.append(f"n_kv_heads={self.n_kv_heads} does not divide n_heads={self.n_heads}")
        if self.d_ff is None:
            self._set("d_ff", 4 * self.d_model)
        if self.inputs == "images":
            self._check_images(problems)  # first: the patch grid sizes the position table
        elif self.inputs == "audio" and not self.n_encoder_layers:
            self._check_audio_encoder(problems)  # its table is the audio front end's
        elif self.positions == "learned":
            if self.max_positions is None:
                # the table is part of the model: fixed from the seq_len the spec is written with, and kept
                # (marked as given) when a later replace() changes seq_len
                self._set("max_positions", self.seq_len)
                self.model_fields_set.add("max_positions")
            elif self.seq_len > self.max_positions:
                problems.append(
                    f"seq_len={self.seq_len} exceeds max_positions={self.max_positions} "
                    "(learned positions have no row for the extra tokens)"
                )
        elif self.max_positions is not None:
            problems.append(
                f"max_positions={self.max_positions} is only for learned positions, not positions={self.positions!r}"
            )
        if self.positions == "relative":
            if self.relative_attention_buckets is None:
                self._set("relative_attention_buckets", 32)
        elif self.relative_attention_buckets is not None:
            problems.append(f"relative_attention_buckets={self.relative_attention_buckets} is only for relative "
                            f"positions, not positions={self.positions!r}")
        if self.top_k > self.n_experts:
            problems.append(f"top_k={self.top_k} is greater than n_experts={self.n_experts}")
        if self.n_experts == 1:
            for field in ("n_shared_experts", "d_expert", "d_shared_expert", "shared_expert_gate", "router_bias",
                          "first_dense_layers", "moe_beside_mlp", "d_moe_latent"):
                value = getattr(self, field)
                if value:
                    problems.append(f"{field}={value} needs a mixture of experts (n_experts > 1), got n_experts=1")
        if self.is_moe:  # a dense model has no experts: its d_expert stays None (and a spec dump round-trips)
            if self.d_expert is None:
                self._set("d_expert", self.d_ff)
            if self.d_shared_expert is None:
                self._set("d_shared_expert", self.d_expert)
        if self.shared_expert_gate and not self.n_shared_experts and self.n_experts > 1:
            problems.append("shared_expert_gate=True needs n_shared_experts > 0, got n_shared_experts=0")
        if self.n_experts == 1 and self.moe_every != 1:
            problems.append(f"moe_every={self.moe_every} needs a mixture of experts (n_experts > 1), got n_experts=1")
        if self.first_dense_layers > self.n_layers:
            problems.append(f"first_dense_layers={self.first_dense_layers} is more than n_layers={self.n_layers}")
        self._check_chunks(problems)
        if self.sliding_window is None:
            for field in ("sliding_window_layers", "attention_pattern"):
                if getattr(self, field) is not None and (field == "sliding_window_layers"
                                                         or "local" in self.attention_pattern
                                                         or "chunked" not in self.attention_pattern):
                    problems.append(f"{field}={getattr(self, field)!r} needs a sliding_window")
        elif self.sliding_window_layers is not None and self.attention_pattern is not None:
            problems.append(f"sliding_window_layers={self.sliding_window_layers} and attention_pattern="
                            f"{self.attention_pattern!r}: give one of them")
        elif self.sliding_window_layers is not None and self.sliding_window_layers > self.n_layers:
            problems.append(f"sliding_window_layers={self.sliding_window_layers} is more than "
                            f"n_layers={self.n_layers}")
        if self.attention_pattern is not None and not self.attention_pattern:
            problems.append("attention_pattern=[]: give at least one of 'global', 'local'")
        if self.sliding_window is not None and not self.causal:
            problems.append(f"sliding_window={self.sliding_window} is a causal window; set causal=true")
        if self.n_encoder_layers:
            if not self.causal:
                problems.append(f"causal=False with n_encoder_layers={self.n_encoder_layers}: an encoder-decoder's "
                                "decoder is causal and its encoder bidirectional")
            for field in ("pooler", "n_token_types"):
                if getattr(self, field):
                    problems.append(f"{field}={getattr(self, field)!r} is for encoder-only models, not an "
                                    f"encoder-decoder (n_encoder_layers={self.n_encoder_layers})")
        elif not self.shared_embeddings:
            problems.append("shared_embeddings=False needs an encoder-decoder (n_encoder_layers > 0)")
        if self.attention_sinks and self.n_encoder_layers:
            problems.append(f"attention_sinks=True is for decoder- or encoder-only models (cross-attention has no "
                            f"sinks), not an encoder-decoder (n_encoder_layers={self.n_encoder_layers})")
        if self.qk_norm != "none" and self.n_encoder_layers:
            problems.append(f"qk_norm={self.qk_norm!r} is for decoder- or encoder-only models (cross-attention has "
                            f"no q/k norms), not an encoder-decoder (n_encoder_layers={self.n_encoder_layers})")
        if self.parallel_block != "none":
            if self.norm_position != "pre":
                problems.append(f"parallel_block={self.parallel_block!r} needs norm_position='pre', got "
                                f"norm_position={self.norm_position!r}")
            if self.n_encoder_layers:
                problems.append(f"parallel_block={self.parallel_block!r} is for decoder- or encoder-only models, not "
                                f"an encoder-decoder (n_encoder_layers={self.n_encoder_layers})")
        if self.rotary_dim is not None:
            if self.positions != "rotary":
                problems.append(f"rotary_dim={self.rotary_dim} is only for rotary positions, not "
                                f"positions={self.positions!r}")
            elif self.d_head is not None and self.rotary_dim > self.d_head:
                problems.append(f"rotary_dim={self.rotary_dim} is more than d_head={self.d_head}")
        if self.shared_blocks is not None:
            if self.shared_blocks > self.n_layers:
                problems.append(f"shared_blocks={self.shared_blocks} is more than n_layers={self.n_layers}")
            kinds = [field for field in ("n_encoder_layers", "sliding_window", "first_dense_layers")
                     if getattr(self, field)] + (["n_experts"] if self.n_experts > 1 else [])
            if kinds:
                problems.append(f"shared_blocks={self.shared_blocks} needs blocks that are all alike: not with "
                                f"{', '.join(f'{k}={getattr(self, k)}' for k in kinds)}")
        self._check_global(problems)
        self._check_per_layer(problems)
        self._check_pattern(problems)
        self._check_kinds(problems)
        if self.moe_beside_mlp and self.is_moe:
            for field, bad in (("norm_position", self.norm_position != "sandwich"),
                               ("n_shared_experts", self.n_shared_experts), ("shared_expert_gate",
                                                                             self.shared_expert_gate),
                               ("parallel_block", self.parallel_block != "none")):
                if bad:
                    problems.append(f"moe_beside_mlp=True is modelled with norm_position='sandwich', no shared "
                                    f"experts and no parallel block, got {field}={getattr(self, field)!r}")
        if self.moe_beside_mlp and self.d_moe_latent is not None:
            problems.append(f"d_moe_latent={self.d_moe_latent} is not modelled with moe_beside_mlp=True (Gemma 4's "
                            "experts read d_model)")
        if self.d_embedding is not None and self.lm_head:
            problems.append(f"d_embedding={self.d_embedding} is for an encoder without an LM head (ALBERT's "
                            "AlbertModel); set lm_head=False")
        if self.d_embedding is not None and self.n_encoder_layers:
            problems.append(f"d_embedding={self.d_embedding} is for decoder- or encoder-only models, not an "
                            f"encoder-decoder (n_encoder_layers={self.n_encoder_layers})")
        if self.head_bias and (not self.lm_head or self.tie_embeddings):
            problems.append(f"head_bias=True needs an untied LM head (lm_head=True, tie_embeddings=False), got "
                            f"lm_head={self.lm_head}, tie_embeddings={self.tie_embeddings}")
        if self.embedding_rows is not None:
            for field, bad in (("tie_embeddings", self.tie_embeddings and self.lm_head),
                               ("n_encoder_layers", self.n_encoder_layers), ("inputs", self.inputs != "tokens")):
                if bad:
                    problems.append(f"embedding_rows={self.embedding_rows} (a token table of its own size) is not "
                                    f"modelled with {field}={getattr(self, field)!r}")
        if self.d_pooler is not None and not self.pooler:
            problems.append(f"d_pooler={self.d_pooler} needs pooler=True")
        if self.n_classes is not None and self.lm_head:
            problems.append(f"n_classes={self.n_classes}: a classifier is a model's head in place of an LM head; set "
                            "lm_head=False")
        for field, bad in (("pooled_final_norm", self.pooled_final_norm), ("d_projection", self.d_projection),
                           ("attention_pool", self.attention_pool)):
            if bad and (self.lm_head or self.n_encoder_layers):
                problems.append(f"{field}={getattr(self, field)!r} pools one token per sequence of an encoder-only "
                                "model without an LM head; set lm_head=False (and n_encoder_layers=0)")
        if self.pooled_final_norm and not self.final_norm:
            problems.append("pooled_final_norm=True needs final_norm=True")
        if self.projection_bias and self.d_projection is None:
            problems.append("projection_bias=True needs d_projection")
        self._check_towers(problems)
        if not self.k_bias and self.is_mla:
            problems.append(f"k_bias=False is not modelled with multi-head latent attention (kv_lora_rank="
                            f"{self.kv_lora_rank})")
        for kind, inputs in (("patch_embedding", "images"), ("audio_conv", "audio")):
            if self.inputs != inputs and kind in self.kinds:
                problems.append(f"kinds.{kind}: only for a model of {inputs} (inputs='{inputs}')")
        if self.inputs == "audio" and self.n_encoder_layers:
            self._check_audio(problems)
        if problems:
            raise ValueError("\n".join(problems))  # one line per problem
        return self

    def _check_towers(self, problems: list[str]) -> None:
        """A vision tower reads images; a tower has no towers of its own; a connector reads a tower the model has."""
        for name, tower in self.towers.items():
            if tower.towers or tower.connectors:
                problems.append(f"towers.{name}: a tower has no towers or connectors of its own")
            if name == "vision" and tower.inputs != "images":
                problems.append(f"towers.vision: a vision tower reads images (inputs='images'), got "
                                f"inputs={tower.inputs!r}")
            if name == "audio" and (tower.inputs != "audio" or tower.n_encoder_layers):
                problems.append(f"towers.audio: an audio tower is an audio encoder (inputs='audio', "
                                f"n_encoder_layers=0), got inputs={tower.inputs!r}, "
                                f"n_encoder_layers={tower.n_encoder_layers}")
        names = [c.name for c in self.connectors]
        for c in self.connectors:
            if c.source != "text" and c.source not in self.towers:
                problems.append(f"connectors: {c.name!r} reads the {c.source} tower, which the model does not have "
                                f"(towers: {', '.join(['text', *self.towers])})")
            if len(c.widths) == 1:
                problems.append(f"connectors: {c.name!r} has widths={c.widths}: give its input and output widths")
            if c.similarity is not None and (c.widths or "vision" not in self.towers):
                problems.append(f"connectors: {c.name!r} has similarity={c.similarity}: the logits of a dual encoder "
                                "with a vision tower, without widths")
            if c.merge_linear and (c.merge == 1 or not c.widths):
                problems.append(f"connectors: {c.name!r} has merge_linear: give merge > 1 and widths")
            if c.norm_before_merge and (c.norm == "none" or not c.widths):
                problems.append(f"connectors: {c.name!r} has norm_before_merge: give a norm and widths")
            elif c.norm_before_merge and not c.merge_linear and c.widths[0] % c.merge:
                problems.append(f"connectors: {c.name!r} has norm_before_merge: widths[0]={c.widths[0]} is not merge="
                                f"{c.merge} tokens of the tower's width")
            if names.count(c.name) > 1:
                problems.append(f"connectors: {c.name!r} is named twice")
        if self.connectors and not self.towers:
            problems.append("connectors: only for a model with towers (towers.vision, towers.audio)")

    def _check_chunks(self, problems: list[str]) -> None:
        """Chunked attention and NoPE blocks: chunked blocks need attention_chunk_size (and it some chunked block),
        causal blocks of ordinary attention in one stack; rotary_layers only with rotary positions."""
        pattern = self.attention_pattern
        chunked = pattern is not None and "chunked" in pattern
        if chunked and self.attention_chunk_size is None:
            problems.append(f"attention_pattern={pattern!r} has chunked blocks: give attention_chunk_size")
        if self.rotary_layers is not None:
            if not self.rotary_layers:
                problems.append("rotary_layers=[]: give one true or false per block (cycled), or leave it out")
            if self.positions != "rotary":
                problems.append(f"rotary_layers is only for rotary positions, not positions={self.positions!r}")
        if self.attention_chunk_size is None:
            return
        where = f"attention_chunk_size={self.attention_chunk_size}"
        if pattern is not None and not chunked:
            problems.append(f"{where}: attention_pattern={pattern!r} has no chunked block to use it")
        for field, bad in (("causal", not self.causal), ("n_encoder_layers", self.n_encoder_layers),
                           ("sliding_window_layers", self.sliding_window_layers is not None),
                           ("kv_lora_rank", self.is_mla), ("kv_shared_layers", self.kv_shared_layers),
                           ("global_d_head", self.global_d_head is not None),
                           ("global_n_kv_heads", self.global_n_kv_heads is not None),
                           ("global_k_eq_v", self.global_k_eq_v), ("block_pattern", self.block_pattern is not None),
                           ("sliding_window", self.sliding_window is not None and pattern is None)):
            if bad:
                problems.append(f"{where} is not modelled with {field}={getattr(self, field)!r}")

    def _check_images(self, problems: list[str]) -> None:
        """A model of images (inputs='images', ViT): the patch embedding's learned position table has a row per patch
        of kinds.patch_embedding.image_size and one for the class token (max_positions, derived); seq_len (the default
        workload, one image at that size) is those tokens; no vocabulary, no LM head, one bidirectional stack."""
        from pydantic import ValidationError

        try:
            sizes = self.sizes("patch_embedding")
        except ValidationError:
            return  # named by _check_kinds
        rows = sizes.table_rows  # (of one tile: Mllama)
        where = f"inputs='images' (kinds.patch_embedding: {sizes.describe()})"
        if self.positions == "rotary":  # a 2-D rotary over the patch grid (Qwen2-VL): no table, no row to run out of
            pass
        elif self.positions != "learned":
            problems.append(f"positions={self.positions!r}: {where} has a learned position table of "
                            f"{rows} rows (positions='learned') or a rotary over its patch grid (positions='rotary')")
        elif self.max_positions is None:
            self._set("max_positions", rows)  # derived from the image size: re-derived when that changes
        elif self.max_positions != rows:
            problems.append(f"max_positions={self.max_positions}: {where} has a position table of {rows} rows, "
                            "the patches and the class token; leave max_positions out")
        tokens = sizes.tokens(sizes.height, sizes.width)  # (Mllama: its tiles, each padded)
        if "seq_len" in self.model_fields_set and self.seq_len != tokens and sizes.height % sizes.multiple == 0 \
                and sizes.width % sizes.multiple == 0:
            what = "its patches and the class token" if sizes.class_token else "its patches"
            if sizes.tiled:
                what = f"{sizes.tiles} tiles of its patches and the class token, each padded to {sizes.pad_to}"
            problems.append(f"seq_len={self.seq_len}: {where} runs on one image's {tokens} tokens ({what}): give "
                            f"seq_len={tokens} with that image size, or keep the model's and give the workload's image "
                            "(--image-size, Workload.image_size)")
        for field, bad in (("vocab_size", self.vocab_size is not None), ("lm_head", self.lm_head),
                           ("n_token_types", self.n_token_types),
                           ("d_embedding", self.d_embedding is not None), ("causal", self.causal),
                           ("n_encoder_layers", self.n_encoder_layers),
                           ("d_per_layer_input", self.d_per_layer_input is not None)):
            if bad:
                problems.append(f"{field}={getattr(self, field)!r} is not modelled with {where}")

    def _check_audio_encoder(self, problems: list[str]) -> None:
        """An audio encoder alone (inputs='audio', n_encoder_layers=0: a multimodal model's audio tower, Voxtral's
        Whisper encoder): one bidirectional stack whose input is the `audio_conv` kind, its learned position table
        kinds.audio_conv.positions rows (max_positions, derived), seq_len its tokens (half the mel frames); no
        vocabulary, no LM head."""
        from pydantic import ValidationError

        try:
            sizes = self.sizes("audio_conv")
        except ValidationError:
            return  # named by _check_kinds
        where = f"inputs='audio' with n_encoder_layers=0 (an audio encoder: kinds.audio_conv: {sizes.describe()})"
        if sizes.subsample:  # Gemma 4's front end: no table (its conformer blocks' attention has relative positions)
            if self.positions != "none":
                problems.append(f"positions={self.positions!r}: {where} has no position table (positions='none')")
        elif self.positions != "learned":
            problems.append(f"positions={self.positions!r}: {where} adds its position table of {sizes.positions} rows "
                            "(positions='learned')")
        elif self.max_positions is None:
            self._set("max_positions", sizes.positions)  # derived from the front end's table
        elif self.max_positions != sizes.positions:
            problems.append(f"max_positions={self.max_positions}: {where} has a position table of "
                            f"{sizes.positions} rows; leave max_positions out")
        if self.seq_len > sizes.positions:
            problems.append(f"seq_len={self.seq_len}: {where} has {sizes.positions} positions")
        for field, bad in (("vocab_size", self.vocab_size is not None), ("lm_head", self.lm_head),
                           ("causal", self.causal), ("n_token_types", self.n_token_types),
                           ("embedding_norm", self.embedding_norm), ("d_embedding", self.d_embedding is not None),
                           ("block_pattern", self.block_pattern is not None and not sizes.subsample),
                           ("d_per_layer_input", self.d_per_layer_input is not None)):
            if bad:
                problems.append(f"{field}={getattr(self, field)!r} is not modelled with {where}")

    def _check_audio(self, problems: list[str]) -> None:
        """A model of audio (inputs='audio', Whisper): an encoder-decoder whose encoder reads mel frames through the
        `audio_conv` kind (its own position table, kinds.audio_conv.positions rows) and whose decoder reads tokens
        from its own table (no table shared with an encoder that reads none) with learned positions (max_positions:
        the decoder's table)."""
        where = "inputs='audio' (the encoder reads mel frames: kinds.audio_conv)"
        for field, bad in (("n_encoder_layers", not self.n_encoder_layers),
                           ("shared_embeddings", self.shared_embeddings),
                           ("positions", self.positions != "learned"), ("n_token_types", self.n_token_types),
                           ("embedding_norm", self.embedding_norm), ("d_embedding", self.d_embedding is not None),
                           ("block_pattern", self.block_pattern is not None)):
            if bad:
                problems.append(f"{field}={getattr(self, field)!r} is not modelled with {where}: an encoder-decoder "
                                "(n_encoder_layers > 0), shared_embeddings=False, positions='learned'")

    def _check_mla(self, problems: list[str]) -> None:
        """Multi-head latent attention: its fields together, d_head = qk_nope_dim + qk_rope_dim (the query/key head),
        one key/value head per query head, rotary on the qk_rope_dim channels (rotary_dim)."""
        mla = ("qk_nope_dim", "qk_rope_dim", "v_head_dim")
        if (self.index_n_heads is None) != (self.index_head_dim is None):
            given = "index_n_heads" if self.index_head_dim is None else "index_head_dim"
            problems.append(f"{given}={getattr(self, given)}: the indexer needs both index_n_heads and "
                            "index_head_dim")
        if self.index_n_heads is None and self.index_topk is not None:
            problems.append(f"index_topk={self.index_topk} is the indexer's: it needs index_n_heads and "
                            "index_head_dim")
        elif self.index_n_heads is not None and self.index_topk is None:
            self._set("index_topk", 2048)
        if self.index_n_heads is not None and self.q_lora_rank is None:
            problems.append(f"index_n_heads={self.index_n_heads}: the indexer's queries read the query latent: it "
                            "needs q_lora_rank (and kv_lora_rank)")
        if self.kv_lora_rank is None:
            for field in ("q_lora_rank", *mla):
                if getattr(self, field) is not None:
                    problems.append(f"{field}={getattr(self, field)} is a multi-head latent attention field: it needs "
                                    "kv_lora_rank")
            return
        where = f"kv_lora_rank={self.kv_lora_rank} (multi-head latent attention)"
        missing = [field for field in mla if getattr(self, field) is None]
        if missing:
            problems.append(f"{where} needs {', '.join(missing)}")
            return
        d_qk = self.qk_nope_dim + self.qk_rope_dim
        if self.d_head is None:
            self._set("d_head", d_qk)
        elif self.d_head != d_qk:
            problems.append(f"d_head={self.d_head}: with {where} a query/key head is qk_nope_dim + qk_rope_dim = "
                            f"{d_qk}; leave d_head out")
        if self.n_kv_heads is not None and self.n_kv_heads != self.n_heads:
            problems.append(f"n_kv_heads={self.n_kv_heads}: with {where} every query head has its own key and value "
                            f"(expanded from the latent), n_kv_heads = n_heads = {self.n_heads}")
        if self.positions != "rotary":
            problems.append(f"positions={self.positions!r}: {where} has rotary positions (on its qk_rope_dim "
                            "channels)")
        elif self.rotary_dim is None:
            self._set("rotary_dim", self.qk_rope_dim)
        elif self.rotary_dim != self.qk_rope_dim:
            problems.append(f"rotary_dim={self.rotary_dim}: with {where} rotary turns the qk_rope_dim="
                            f"{self.qk_rope_dim} channels; leave rotary_dim out")
        if self.index_head_dim is not None and self.index_head_dim < self.qk_rope_dim:
            problems.append(f"index_head_dim={self.index_head_dim}: the indexer turns the first qk_rope_dim="
                            f"{self.qk_rope_dim} channels of each of its heads by rotary; give at least that many")
        for field, bad in (("n_encoder_layers", self.n_encoder_layers), ("qk_norm", self.qk_norm != "none"),
                           ("attention_sinks", getattr(self, "attention_sinks", False)),
                           ("attention_gate", getattr(self, "attention_gate", False)),
                           ("parallel_block", getattr(self, "parallel_block", "none") != "none")):
            if bad:
                problems.append(f"{field}={getattr(self, field)!r} is not modelled with {where}")

    def _check_pattern(self, problems: list[str]) -> None:
        """block_pattern: known kinds, each once a block, the MLP or the experts (not both), the experts where the
        spec has some; not with the fields that say the same another way or that read a block's place."""
        if self.block_pattern is None:
            return
        from .arch.builders import KINDS  # the registry of block kinds (loaded with tfcalc.arch)

        allowed = [name for name, kind in KINDS.items() if kind.in_pattern]
        if not self.block_pattern:
            problems.append(f"block_pattern=[]: give at least one block, of {', '.join(allowed)} joined by '+'")
        for block in self.block_pattern:
            kinds = block.split("+")
            unknown = [k for k in kinds if k not in allowed]
            if unknown:
                problems.append(f"block_pattern: {block!r} has {', '.join(map(repr, unknown))}; a block is made "
                                f"of {', '.join(allowed)}, joined by '+'")
            elif len(set(kinds)) < len(kinds) or {"mlp", "moe"} <= set(kinds):
                problems.append(f"block_pattern: {block!r}: each kind at most once a block, and the MLP or the "
                                "experts, not both")
        has_moe = any("moe" in block.split("+") for block in self.block_pattern)
        present = self.block_pattern[:self.n_layers]  # the blocks the stack has (a pattern longer than it is cut)
        if self.positions == "relative" and not any("attention" in block.split("+") for block in present):
            problems.append(f"positions='relative' is T5's bias on attention scores; block_pattern="
                            f"{self.block_pattern!r} has no attention block to add it to (positions='none')")
        if has_moe != self.is_moe:
            problems.append(f"block_pattern={self.block_pattern!r} " + (
                "has 'moe' blocks: give n_experts > 1" if has_moe else
                f"has no 'moe' block, and n_experts={self.n_experts}: put 'moe' where the experts are"))
        for field, bad in (("moe_every", self.moe_every != 1), ("first_dense_layers", self.first_dense_layers),
                           ("n_encoder_layers", self.n_encoder_layers),
                           ("parallel_block", self.parallel_block != "none"), ("moe_beside_mlp", self.moe_beside_mlp),
                           ("d_per_layer_input", self.d_per_layer_input), ("kv_shared_layers", self.kv_shared_layers),
                           ("shared_blocks", self.shared_blocks is not None)):
            if bad:
                problems.append(f"block_pattern={self.block_pattern!r} is not modelled with "
                                f"{field}={getattr(self, field)!r}" + (" (the pattern says which blocks are MoE)"
                                                                         if field in ("moe_every",
                                                                                      "first_dense_layers") else ""))

    def _check_kinds(self, problems: list[str]) -> None:
        """kinds: sizes only for kinds with sizes of their own that the block_pattern uses, each valid by the kind's
        model (named as kinds.<kind>.<field>=<value>); a kind's own checks of the rest of the spec."""
        used = set(self._used_kinds())
        if not self.kinds and not used:
            return
        from pydantic import ValidationError

        from .arch.builders import KINDS

        for name, given in self.kinds.items():
            kind = KINDS.get(name)
            if kind is None or kind.sizes is None:
                with_sizes = [k for k, v in KINDS.items() if v.sizes is not None]
                problems.append(f"kinds.{name}: not a block kind with sizes of its own (those are: "
                                f"{', '.join(with_sizes) or 'none'})")
            elif name not in used:
                if name not in self._frame_kinds() and name in ("patch_embedding", "audio_conv"):
                    continue  # named in _derive_and_check: a model of tokens
                problems.append(f"kinds.{name}={given!r}: no block of the block_pattern is {name!r}")
            else:
                try:
                    kind.sizes.model_validate(given)
                except ValidationError as e:
                    for err in e.errors():
                        where = ".".join(str(p) for p in err["loc"])
                        value = f"={err['input']!r}" if err["type"] != "missing" else ""
                        problems.append(f"kinds.{name}.{where}{value}: {err['msg']}")
        for name in sorted(used):
            kind = KINDS.get(name)
            if kind is not None and kind.sizes is not None:
                try:
                    sizes = kind.sizes.model_validate(self.kinds.get(name, {}))
                except ValidationError:
                    continue  # named above
                problems.extend(sizes.problems(self))

    def used_sizes(self) -> dict:
        """The sizes of every kind the block_pattern uses that has sizes of its own, by kind, in pattern order."""
        from .arch.builders import KINDS

        return {name: self.sizes(name) for name in self._used_kinds()
                if name in KINDS and KINDS[name].sizes is not None}

    def _used_kinds(self) -> list[str]:
        """The kinds the spec uses, in order: the frame's (a patch embedding), then those the block_pattern names,
        each followed by the kinds it is made of (its parts)."""
        from .arch.builders import KINDS

        named = dict.fromkeys([*sorted(self._frame_kinds()),
                               *(k for block in self.block_pattern or () for k in block.split("+"))])
        return list(dict.fromkeys(k for name in named for k in (
            name, *(KINDS[name].parts if name in KINDS else ()))))

    def _frame_kinds(self) -> set[str]:
        """The frame's kinds with sizes of their own the spec uses: the patch embedding of a model of images, the
        audio front end of a model of audio, and the kinds after its stack (`output_kinds`)."""
        own = {"images": {"patch_embedding"}, "audio": {"audio_conv"}}.get(self.inputs, set())
        return own | set(self.output_kinds) | self._inserted_kinds()

    def _inserted_kinds(self) -> set[str]:
        """The kinds a spec names by their sizes that run once between two blocks (`BlockKind.inserted`: MiniCPM-V's
        window merger)."""
        from .arch.builders import KINDS

        return {name for name in self.kinds if (kind := KINDS.get(name)) is not None and kind.inserted}

    @property
    def output_kinds(self) -> tuple[str, ...]:
        """The frame's kinds after the stack's final norm, before the head, that a spec names by their sizes: a
        patch merger (Qwen2-VL's vision tower: kinds.patch_merger), a pooler (Gemma 4's: kinds.patch_pooler), a linear
        over every token (Gemma 4's audio output_proj: kinds.token_projection)."""
        return tuple(kind for kind in ("patch_merger", "patch_pooler", "token_projection") if kind in self.kinds)

    @property
    def input_kind(self) -> str:
        """The block kind of the model's input: `embedding` (tokens), `patch_embedding` (images) or `audio_conv`
        (audio, read by the encoder)."""
        return {"images": "patch_embedding", "audio": "audio_conv"}.get(self.inputs, "embedding")

    def stack_input(self, stack: str) -> str:
        """The block kind of stack `stack`'s input ("" for the one stack, "encoder" or "decoder"): the model's
        input kind, but a model of audio's decoder reads tokens (`embedding`)."""
        return "embedding" if stack == "decoder" else self.input_kind

    def sizes(self, kind: str):
        """The sizes of block kind `kind` (its own pydantic model), as given under kinds.<kind>, with its defaults."""
        from .arch.builders import KINDS

        model = KINDS[kind].sizes
        if model is None:
            raise KeyError(f"{kind!r} has no sizes of its own")
        return model.model_validate(self.kinds.get(kind, {}))

    def _check_global(self, problems: list[str]) -> None:
        """The global blocks' own attention shape: refused with an encoder-decoder (cross-attention has one shape),
        MLA (its heads are the latent's) and, with global_d_head, rotary_dim (which of the two widths it turns)."""
        fields = {f: getattr(self, f) for f in ("global_d_head", "global_n_kv_heads", "global_k_eq_v")
                  if getattr(self, f) not in (None, False)}
        if not fields:
            return
        given = ", ".join(f"{k}={v}" for k, v in fields.items())
        if self.global_n_kv_heads is not None and self.n_heads % self.global_n_kv_heads:
            problems.append(f"global_n_kv_heads={self.global_n_kv_heads} does not divide n_heads={self.n_heads}")
        for field, bad in (("n_encoder_layers", self.n_encoder_layers), ("kv_lora_rank", self.is_mla),
                           ("rotary_dim", self.rotary_dim is not None and self.global_d_head is not None)):
            if bad:
                problems.append(f"{given} is not modelled with {field}={getattr(self, field)!r}")

    def _check_per_layer(self, problems: list[str]) -> None:
        """Per-layer embeddings and KV sharing: decoder- or encoder-only stacks of ordinary attention."""
        if self.per_layer_vocab is not None and self.d_per_layer_input is None:
            problems.append(f"per_layer_vocab={self.per_layer_vocab} needs d_per_layer_input")
        if self.kv_shared_d_ff is not None and not self.kv_shared_layers:
            problems.append(f"kv_shared_d_ff={self.kv_shared_d_ff} needs kv_shared_layers > 0")
        if self.kv_shared_layers >= self.n_layers and self.kv_shared_layers:
            problems.append(f"kv_shared_layers={self.kv_shared_layers}: at least one block before them computes the "
                            f"keys and values they reuse, n_layers={self.n_layers}")
        elif self.kv_shared_layers and self.causal:
            head, tail = self._kinds(0, self.n_layers - self.kv_shared_layers), self._kinds(
                self.n_layers - self.kv_shared_layers, self.n_layers)
            if not tail <= head:
                problems.append(f"kv_shared_layers={self.kv_shared_layers}: the shared blocks include "
                                f"{' and '.join(sorted(tail - head))} blocks, and no block of that kind comes before "
                                "them to compute the keys and values they reuse")
        given = ", ".join(f"{f}={getattr(self, f)}" for f in ("d_per_layer_input", "kv_shared_layers")
                          if getattr(self, f))
        if not given:
            return
        for field, bad in (("n_encoder_layers", self.n_encoder_layers), ("kv_lora_rank", self.is_mla),
                           ("shared_blocks", self.shared_blocks is not None),
                           ("parallel_block", self.parallel_block != "none")):
            if bad:
                problems.append(f"{given} is not modelled with {field}={getattr(self, field)!r}")

    def _kinds(self, lo: int, hi: int) -> set[str]:
        """'local' and 'global': the kinds of causal blocks lo..hi-1 (by arithmetic over the pattern's period)."""
        if self.sliding_window is None:
            return {"global"} if hi > lo else set()
        if self.attention_pattern is not None:
            n = len(self.attention_pattern)
            return set(self.attention_pattern) if hi - lo >= n else {
                self.attention_pattern[i % n] for i in range(lo, hi)}
        first_local = self.n_layers - (self.n_layers if self.sliding_window_layers is None
                                       else self.sliding_window_layers)
        return ({"global"} if lo < min(hi, first_local) else set()) | ({"local"} if hi > max(lo, first_local)
                                                                        else set())

    def attention_shape(self, windowed: bool) -> tuple[int, int, bool]:
        """(d_head, key/value heads, values are the keys) of a block's self-attention: a global block's (no
        window) are global_d_head, global_n_kv_heads and global_k_eq_v where they are given."""
        if windowed:
            return self.d_head, self.n_kv_heads, False
        return (self.global_d_head or self.d_head, self.global_n_kv_heads or self.n_kv_heads, self.global_k_eq_v)

    @property
    def is_mla(self) -> bool:
        """Multi-head latent attention (kv_lora_rank is set)."""
        return self.kv_lora_rank is not None

    def _set(self, field: str, value: int) -> None:
        # The model is frozen; derived defaults are filled in once, here, and are not marked as given.
        self.__dict__[field] = value

    # ---- derived sizes -------------------------------------------------------------------------
    @property
    def d_attn(self) -> int:
        """Width of all query heads together (H * d_head); equals d_model unless d_head says otherwise."""
        return self.n_heads * self.d_head

    @property
    def d_kv(self) -> int:
        """Width of all key (or value) heads together (n_kv_heads * d_head)."""
        return self.n_kv_heads * self.d_head

    @property
    def rotated(self) -> int:
        """Channels of a query or key head that rotary rotates (rotary_dim, else d_head), rounded down to even."""
        d = self.rotary_dim if self.rotary_dim is not None else self.d_head
        return d - d % 2

    @property
    def is_moe(self) -> bool:
        """Some blocks are mixtures of experts."""
        return self.n_experts > 1

    @property
    def is_encoder_decoder(self) -> bool:
        return self.n_encoder_layers > 0

    @property
    def cross_attends(self) -> bool:
        """Some blocks attend to another sequence (src_len of its tokens): an encoder-decoder's decoder, or a
        block_pattern's cross_attention blocks (Llama 3.2 Vision's gated cross-attention to the vision tokens)."""
        return self.is_encoder_decoder or any("cross_attention" in block.split("+")
                                              for block in (self.block_pattern or ())[:self.n_layers])

    @property
    def tokens(self) -> int:
        """Tokens in one step: batch_size * seq_len."""
        return self.batch_size * self.seq_len

    @property
    def has_qkv_bias(self) -> bool:
        return self.bias if self.qkv_bias is None else self.qkv_bias

    @property
    def has_mlp_bias(self) -> bool:
        return self.bias if self.mlp_bias is None else self.mlp_bias

    @property
    def label(self) -> str:
        return self.name or (
            f"L{self.n_layers} D{self.d_model} H{self.n_heads} "
            f"{self.inputs if self.vocab_size is None else f'V{self.vocab_size}'} N{self.seq_len}"
        )

    # ---- changing a spec -----------------------------------------------------------------------
    def given(self) -> dict[str, Any]:
        """The fields that were given explicitly (derived defaults left out)."""
        return {field: getattr(self, field) for field in self.model_fields_set}

    def model_copy(self, *, update: dict[str, Any] | None = None, deep: bool = False) -> ModelSpec:
        """A validated copy: fields in `update` replace given ones, and derived defaults are re-derived."""
        if not update:
            return super().model_copy(deep=deep)
        return type(self).model_validate({**self.given(), **update})

    def replace(self, **changes: Any) -> ModelSpec:
        """`spec.replace(seq_len=8192)`: a validated copy with some fields changed."""
        return self.model_copy(update=changes)
