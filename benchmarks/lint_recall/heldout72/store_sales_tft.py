"""Temporal Fusion Transformer for grocery store-family sales (Favorita-style).

pytorch-forecasting layout reduced to one file: gated residual networks,
variable selection over past inputs (sales, promotions, oil price) and known
future inputs (promotions, holidays, weekday), LSTM encoder/decoder, static
enrichment from the store and product family, and interpretable multi-head
attention with shared values. Stores opened inside the window have their
history padded at the start.

Source: huggingface/transformers PR #27114 (conventions.md section 3 item 15);
NVIDIA-NeMo/Automodel PR #2658 (section 3 item 16); conventions.md sections 2.3 and 5 item 4.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

QUANTILES = [0.1, 0.5, 0.9]


class GatedLinearUnit(nn.Module):
    def __init__(self, input_size, hidden_size, dropout=0.1):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.fc = nn.Linear(input_size, hidden_size * 2)

    def forward(self, x):
        return F.glu(self.fc(self.dropout(x)), dim=-1)


class GateAddNorm(nn.Module):
    def __init__(self, input_size, hidden_size, dropout=0.1):
        super().__init__()
        self.glu = GatedLinearUnit(input_size, hidden_size, dropout)
        self.norm = nn.LayerNorm(hidden_size)

    def forward(self, x, skip):
        return self.norm(self.glu(x) + skip)


class GatedResidualNetwork(nn.Module):
    def __init__(self, input_size, hidden_size, output_size, context_size=None, dropout=0.1):
        super().__init__()
        self.resample = nn.Linear(input_size, output_size) if input_size != output_size else nn.Identity()
        self.fc1 = nn.Linear(input_size, hidden_size)
        self.context = nn.Linear(context_size, hidden_size, bias=False) if context_size else None
        self.fc2 = nn.Linear(hidden_size, hidden_size)
        self.gate_norm = GateAddNorm(hidden_size, output_size, dropout)

    def forward(self, x, context=None):
        residual = self.resample(x)
        x = self.fc1(x)
        if context is not None:
            x = x + self.context(context)
        return self.gate_norm(self.fc2(F.elu(x)), residual)


class VariableSelectionNetwork(nn.Module):
    def __init__(self, num_inputs, hidden_size, context_size):
        super().__init__()
        self.prescalers = nn.ModuleList([nn.Linear(1, hidden_size) for _ in range(num_inputs)])
        self.flattened_grn = GatedResidualNetwork(num_inputs, hidden_size, num_inputs, context_size)
        self.single_grns = nn.ModuleList([GatedResidualNetwork(hidden_size, hidden_size, hidden_size)
                                          for _ in range(num_inputs)])

    def forward(self, x, context):
        weights = torch.softmax(self.flattened_grn(x, context), dim=-1)
        embeddings = torch.stack([grn(pre(x[..., i : i + 1])) for i, (pre, grn)
                                  in enumerate(zip(self.prescalers, self.single_grns))], dim=-1)
        return (embeddings * weights.unsqueeze(-2)).sum(-1), weights


class InterpretableMultiHeadAttention(nn.Module):
    def __init__(self, n_head, d_model, dropout=0.1):
        super().__init__()
        self.n_head, self.d_k = n_head, d_model // n_head
        self.v_layer = nn.Linear(d_model, self.d_k)
        self.q_layers = nn.ModuleList([nn.Linear(d_model, self.d_k) for _ in range(n_head)])
        self.k_layers = nn.ModuleList([nn.Linear(d_model, self.d_k) for _ in range(n_head)])
        self.w_h = nn.Linear(self.d_k, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, q, k, v, mask):
        vs = self.v_layer(v)
        heads, attns = [], []
        for q_layer, k_layer in zip(self.q_layers, self.k_layers):
            scores = torch.bmm(q_layer(q), k_layer(k).transpose(1, 2)) / self.d_k**0.5
            attn = torch.softmax(scores + mask, dim=-1)
            heads.append(torch.bmm(self.dropout(attn), vs))
            attns.append(attn)
        return self.w_h(torch.stack(heads).mean(0)), torch.stack(attns, dim=1)


class TemporalFusionTransformer(nn.Module):
    def __init__(self, n_stores, n_families, n_past=4, n_future=3, hidden_size=16, n_head=4):
        super().__init__()
        self.store_embedding = nn.Embedding(n_stores, hidden_size)
        self.family_embedding = nn.Embedding(n_families, hidden_size)
        self.static_context = GatedResidualNetwork(2 * hidden_size, hidden_size, hidden_size)
        self.encoder_variable_selection = VariableSelectionNetwork(n_past, hidden_size, hidden_size)
        self.decoder_variable_selection = VariableSelectionNetwork(n_future, hidden_size, hidden_size)
        self.lstm_encoder = nn.LSTM(hidden_size, hidden_size, batch_first=True)
        self.lstm_decoder = nn.LSTM(hidden_size, hidden_size, batch_first=True)
        self.post_lstm_gate = GateAddNorm(hidden_size, hidden_size)
        self.static_enrichment = GatedResidualNetwork(hidden_size, hidden_size, hidden_size, hidden_size)
        self.multihead_attn = InterpretableMultiHeadAttention(n_head, hidden_size)
        self.post_attn_gate_norm = GateAddNorm(hidden_size, hidden_size)
        self.pos_wise_ff = GatedResidualNetwork(hidden_size, hidden_size, hidden_size)
        self.output_layer = nn.Linear(hidden_size, len(QUANTILES))

    @staticmethod
    def get_attention_mask(encoder_lengths, encoder_length_max, decoder_length, dtype=torch.float32):
        total = encoder_length_max + decoder_length
        min_value = torch.finfo(dtype).min
        future = torch.ones(total, total, dtype=torch.bool, device=encoder_lengths.device).triu(1)
        causal = torch.zeros(total, total, dtype=dtype, device=encoder_lengths.device).masked_fill(future, min_value)
        n_pad = encoder_length_max - encoder_lengths
        pad = torch.arange(total, device=encoder_lengths.device)[None, :] < n_pad[:, None]
        padding = torch.zeros(pad.shape, dtype=dtype, device=pad.device).masked_fill(pad, min_value)[:, None, :]
        return causal[None] + padding  # expect: MC513 sum

    def forward(self, x):
        static = self.static_context(torch.cat([self.store_embedding(x["store"]),
                                                self.family_embedding(x["family"])], dim=-1))
        enc_len_max, dec_len = x["encoder_cont"].shape[1], x["decoder_cont"].shape[1]
        ctx_enc = static[:, None].expand(-1, enc_len_max, -1)
        ctx_dec = static[:, None].expand(-1, dec_len, -1)
        emb_enc, enc_weights = self.encoder_variable_selection(x["encoder_cont"], ctx_enc)
        emb_dec, _ = self.decoder_variable_selection(x["decoder_cont"], ctx_dec)
        state = (static[None].contiguous(), static[None].contiguous())
        out_enc, state = self.lstm_encoder(emb_enc, state)
        out_dec, _ = self.lstm_decoder(emb_dec, state)
        lstm_out = self.post_lstm_gate(torch.cat([out_enc, out_dec], 1), torch.cat([emb_enc, emb_dec], 1))
        attn_in = self.static_enrichment(lstm_out, static[:, None].expand(-1, lstm_out.shape[1], -1))
        mask = self.get_attention_mask(x["encoder_lengths"], enc_len_max, dec_len, attn_in.dtype)
        attn_out, attn = self.multihead_attn(attn_in, attn_in, attn_in, mask)
        out = self.pos_wise_ff(self.post_attn_gate_norm(attn_out, attn_in))
        return self.output_layer(out[:, -dec_len:]), attn, enc_weights


def quantile_loss(pred, target):
    losses = [torch.max(q * (target - pred[..., i]), (q - 1) * (target - pred[..., i])) for i, q in enumerate(QUANTILES)]
    return torch.stack(losses, -1).mean()


def make_batch(encoder_lengths, enc_max=21, dec_len=7):
    b = len(encoder_lengths)
    total = enc_max + dec_len
    t = torch.arange(total, dtype=torch.float32)
    promo = (torch.rand(b, total) < 0.2).float()
    holiday = (t % 14 == 3).float().expand(b, -1)
    dow = torch.sin(t * 6.2832 / 7).expand(b, -1)
    sales = 2 + dow + 1.5 * promo + 0.2 * torch.randn(b, total)
    oil = torch.randn(b, total).cumsum(-1) * 0.05
    lengths = torch.tensor(encoder_lengths)
    opened = t[None, :] >= (enc_max - lengths)[:, None]
    encoder_cont = torch.stack([sales, promo, oil, dow], -1)[:, :enc_max] * opened[:, :enc_max, None]
    return {
        "store": torch.randint(0, 10, (b,)), "family": torch.randint(0, 5, (b,)),
        "encoder_cont": encoder_cont, "decoder_cont": torch.stack([promo, holiday, dow], -1)[:, enc_max:],
        "encoder_lengths": lengths, "target": sales[:, enc_max:],
    }


if __name__ == "__main__":
    torch.manual_seed(0)
    batch = make_batch([21, 14, 6, 21])
    model = TemporalFusionTransformer(n_stores=10, n_families=5)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    for step in range(5):
        pred, attn, _ = model(batch)
        loss = quantile_loss(pred, batch["target"])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        pred, attn, enc_weights = model(batch)
    importance = enc_weights.mean((0, 1))
    print("loss %.4f" % loss.item(), "p50", tuple(pred[..., 1].shape), "variable importance", importance.tolist())
