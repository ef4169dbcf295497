"""EQTransformer-style earthquake detection and P / S phase picking on three-component waveforms.

Follows the PyTorch port of EQTransformer (Mousavi et al. 2020) in SeisBench: a convolutional
encoder with max-pooling, residual CNN blocks, a bidirectional LSTM stack, two transformer blocks
of additive self-attention for the detection branch, local attention (attention_width=3) in the P
and S branches, and upsampling decoders giving per-sample probabilities. Trained on synthetic
events in noise; continuous data is annotated window by window with 50 % overlap, on the CPU
under bfloat16 autocast as in the throughput-oriented deployment.

Source: NVIDIA/apex#1052, huggingface/lerobot PR #710 (conventions.md §3 items 18 and 19), conventions.md §2.3
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

WINDOW = 1024


def synth_window(g, with_event=True):
    x = 0.1 * torch.randn(3, WINDOW, generator=g)
    p_idx, s_idx = -1, -1
    if with_event:
        p_idx = int(torch.randint(100, 500, (1,), generator=g))
        s_idx = p_idx + int(torch.randint(80, 300, (1,), generator=g))
        t = torch.arange(WINDOW).float()
        for onset, amp, freq, comps in ((p_idx, 0.6, 0.15, [0]), (s_idx, 1.2, 0.07, [1, 2])):
            env = torch.where(t >= onset, torch.exp(-(t - onset) / 120.0), torch.zeros(()))
            for c in comps:
                x[c] += amp * env * torch.sin(freq * (t - onset) + float(torch.rand(1, generator=g)) * 6)
    return x, p_idx, s_idx


def make_labels(p_idx, s_idx, sigma=10.0):
    t = torch.arange(WINDOW).float()
    if p_idx < 0:
        return torch.zeros(3, WINDOW)
    det = ((t >= p_idx) & (t <= s_idx + 1.4 * (s_idx - p_idx))).float()
    p = torch.exp(-0.5 * ((t - p_idx) / sigma) ** 2)
    s = torch.exp(-0.5 * ((t - s_idx) / sigma) ** 2)
    return torch.stack([det, p, s])


class SeqSelfAttention(nn.Module):
    def __init__(self, input_size, units=32, attention_width=None):
        super().__init__()
        self.attention_width = attention_width
        self.Wt = nn.Linear(input_size, units, bias=False)
        self.Wx = nn.Linear(input_size, units)
        self.Wa = nn.Linear(units, 1)

    def forward(self, x):
        q = self.Wt(x).unsqueeze(2)
        k = self.Wx(x).unsqueeze(1)
        e = self.Wa(torch.tanh(q + k)).squeeze(-1)
        if self.attention_width is not None:
            idx = torch.arange(e.size(-1), device=e.device)
            outside = (idx[None, :] - idx[:, None]).abs() > self.attention_width // 2
            e = e.masked_fill(outside, torch.finfo(torch.float32).min)  # expect: MC517 eqt
        a = torch.softmax(e, dim=-1)
        return torch.matmul(a, x), a


class FeedForward(nn.Module):
    def __init__(self, io_size, drop_rate, hidden_size=128):
        super().__init__()
        self.lin1, self.lin2 = nn.Linear(io_size, hidden_size), nn.Linear(hidden_size, io_size)
        self.dropout = nn.Dropout(drop_rate)

    def forward(self, x):
        return self.lin2(self.dropout(F.relu(self.lin1(x))))


class Transformer(nn.Module):
    def __init__(self, input_size, drop_rate, attention_width=None):
        super().__init__()
        self.attention = SeqSelfAttention(input_size, attention_width=attention_width)
        self.norm1, self.norm2 = nn.LayerNorm(input_size), nn.LayerNorm(input_size)
        self.ff = FeedForward(input_size, drop_rate)

    def forward(self, x):
        y, weight = self.attention(x)
        y = self.norm1(x + y)
        return self.norm2(y + self.ff(y)), weight


class ResCNNBlock(nn.Module):
    def __init__(self, channels, kernel_size, drop_rate):
        super().__init__()
        self.bn1, self.bn2 = nn.BatchNorm1d(channels), nn.BatchNorm1d(channels)
        self.conv1 = nn.Conv1d(channels, channels, kernel_size, padding=kernel_size // 2)
        self.conv2 = nn.Conv1d(channels, channels, kernel_size, padding=kernel_size // 2)
        self.dropout = nn.Dropout(drop_rate)

    def forward(self, x):
        y = self.conv1(self.dropout(F.relu(self.bn1(x))))
        return x + self.conv2(self.dropout(F.relu(self.bn2(y))))


class Decoder(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.ups = nn.ModuleList([nn.Conv1d(c_in, c_out, 5, padding=2) for c_in, c_out in
                                  zip(channels[:-1], channels[1:])])
        self.out = nn.Conv1d(channels[-1], 1, 11, padding=5)

    def forward(self, x):
        for conv in self.ups:
            x = F.relu(conv(F.interpolate(x, scale_factor=2, mode="nearest")))
        return torch.sigmoid(self.out(x)).squeeze(1)


class EQTransformer(nn.Module):
    def __init__(self, in_channels=3, drop_rate=0.1, lstm_units=16):
        super().__init__()
        filters = [8, 16, 16, 32, 32]
        self.encoder = nn.ModuleList()
        for c_in, c_out in zip([in_channels] + filters[:-1], filters):
            self.encoder.append(nn.Sequential(nn.Conv1d(c_in, c_out, 7, padding=3), nn.ReLU(), nn.MaxPool1d(2)))
        self.res_cnn = nn.Sequential(*[ResCNNBlock(filters[-1], 3, drop_rate) for _ in range(2)])
        self.bi_lstm = nn.LSTM(filters[-1], lstm_units, batch_first=True, bidirectional=True)
        self.lstm_proj = nn.Linear(2 * lstm_units, filters[-1])
        self.transformer_d0 = Transformer(filters[-1], drop_rate)
        self.transformer_d = Transformer(filters[-1], drop_rate)
        self.pick_lstms = nn.ModuleList([nn.LSTM(filters[-1], filters[-1], batch_first=True) for _ in range(2)])
        self.pick_attentions = nn.ModuleList([Transformer(filters[-1], drop_rate, attention_width=3)
                                              for _ in range(2)])
        decoder_channels = [filters[-1]] + filters[::-1]
        self.decoder_d = Decoder(decoder_channels)
        self.pick_decoders = nn.ModuleList([Decoder(decoder_channels) for _ in range(2)])

    def forward(self, x):
        for block in self.encoder:
            x = block(x)
        x = self.res_cnn(x).transpose(1, 2)
        x = self.lstm_proj(self.bi_lstm(x)[0])
        x, _ = self.transformer_d0(x)
        x, _ = self.transformer_d(x)
        outputs = [self.decoder_d(x.transpose(1, 2))]
        for lstm, attention, decoder in zip(self.pick_lstms, self.pick_attentions, self.pick_decoders):
            px, _ = attention(lstm(x)[0])
            outputs.append(decoder(px.transpose(1, 2)))
        return torch.stack(outputs, dim=1)


def annotate_stream(model, stream, dtype=torch.bfloat16):
    model.eval()
    step = WINDOW // 2
    probs = torch.zeros(3, stream.size(-1))
    counts = torch.zeros(stream.size(-1))
    windows = stream.unfold(-1, WINDOW, step).permute(1, 0, 2)
    windows = windows / windows.abs().amax(dim=(1, 2), keepdim=True).clamp(min=1e-6)
    with torch.no_grad(), torch.autocast(device_type="cpu", dtype=dtype, enabled=dtype != torch.float32):
        out = model(windows).float()
    for i, w in enumerate(out):
        probs[:, i * step: i * step + WINDOW] += w
        counts[i * step: i * step + WINDOW] += 1
    return probs / counts.clamp(min=1)


def picks(prob, threshold=0.3, min_distance=100):
    peaks = (prob[1:-1] > prob[:-2]) & (prob[1:-1] >= prob[2:]) & (prob[1:-1] > threshold)
    found = []
    for i in (torch.nonzero(peaks).squeeze(-1) + 1).tolist():
        if not found or i - found[-1] > min_distance:
            found.append(i)
    return found


def main():
    g = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    model = EQTransformer()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    weights = torch.tensor([0.05, 0.40, 0.55])
    for step in range(250):
        model.train()
        batch = [synth_window(g, with_event=bool(torch.rand(1, generator=g) < 0.8)) for _ in range(32)]
        x = torch.stack([b[0] for b in batch])
        x = x / x.abs().amax(dim=(1, 2), keepdim=True)
        y = torch.stack([make_labels(b[1], b[2]) for b in batch])
        loss = (F.binary_cross_entropy(model(x), y, reduction="none").mean(dim=(0, 2)) * weights).sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 50 == 0:
            print(f"step {step} loss {loss.item():.4f}")
    stream, true_p = 0.1 * torch.randn(3, 8 * WINDOW, generator=g), []
    for start in range(300, 8 * WINDOW - WINDOW, 1500):
        event, p_idx, _ = synth_window(g)
        stream[:, start:start + WINDOW] += event
        true_p.append(start + p_idx)
    for dtype in (torch.float32, torch.bfloat16):
        p_picks = picks(annotate_stream(model, stream, dtype)[1])
        hits = sum(any(abs(p - t) <= 20 for p in p_picks) for t in true_p)
        print(f"{dtype}: {len(p_picks)} P picks, {hits}/{len(true_p)} events picked within 20 samples")


if __name__ == "__main__":
    main()
