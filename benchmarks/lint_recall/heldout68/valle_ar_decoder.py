"""VALL-E style autoregressive codec language model for zero-shot voice cloning.

The AR stage reads phoneme ids and predicts the first codebook of a neural codec
token by token; the phonemes attend to each other freely, the audio tokens attend
to all phonemes and to earlier audio tokens. Inference continues an acoustic prompt
(three seconds of the target speaker) for the text that follows the prompt's text.

Source: seed self_attention_mask_guide.txt section 3; pytorch/pytorch#103749
(conventions.md section 3 item 5); conventions.md section 2.7.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

NUM_TEXT_TOKENS = 64
NUM_AUDIO_TOKENS = 32
EOS = NUM_AUDIO_TOKENS


def make_pad_mask(lengths: torch.Tensor, max_len: int = 0) -> torch.Tensor:
    assert lengths.ndim == 1, lengths.ndim
    max_len = max(max_len, lengths.max())
    n = lengths.size(0)
    seq_range = torch.arange(0, max_len, device=lengths.device)
    expaned_lengths = seq_range.unsqueeze(0).expand(n, max_len)
    return expaned_lengths >= lengths.unsqueeze(-1)


def build_xy_attn_mask(x_len: int, y_len: int, device) -> torch.Tensor:
    x_attn_mask = F.pad(torch.zeros((x_len, x_len), dtype=torch.bool, device=device), (0, y_len), value=True)
    y_causal = torch.triu(torch.ones(y_len, y_len, dtype=torch.bool, device=device), diagonal=0)  # expect: MC503 diagonal
    y_attn_mask = F.pad(y_causal, (x_len, 0), value=False)
    return torch.concat([x_attn_mask, y_attn_mask], dim=0)


class SinePositionalEmbedding(nn.Module):
    def __init__(self, dim_model: int, scale: bool = False):
        super().__init__()
        self.dim_model = dim_model
        self.x_scale = math.sqrt(dim_model) if scale else 1.0
        self.alpha = nn.Parameter(torch.ones(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = x.size(1)
        position = torch.arange(0, t, dtype=torch.float32).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, self.dim_model, 2, dtype=torch.float32) * -(math.log(10000.0) / self.dim_model))
        pe = torch.zeros(t, self.dim_model)
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        return x * self.x_scale + self.alpha * pe.to(x.device, x.dtype).unsqueeze(0)


class DecoderLayer(nn.Module):
    def __init__(self, d_model: int, nhead: int):
        super().__init__()
        self.norm1 = nn.LayerNorm(d_model)
        self.self_attn = nn.MultiheadAttention(d_model, nhead, batch_first=True)
        self.norm2 = nn.LayerNorm(d_model)
        self.ff = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.ReLU(), nn.Linear(4 * d_model, d_model))

    def forward(self, x, mask, key_padding_mask=None):
        h = self.norm1(x)
        x = x + self.self_attn(h, h, h, attn_mask=mask, key_padding_mask=key_padding_mask, need_weights=False)[0]
        return x + self.ff(self.norm2(x))


class VALLEAR(nn.Module):
    def __init__(self, d_model: int = 64, nhead: int = 4, num_layers: int = 2):
        super().__init__()
        self.ar_text_embedding = nn.Embedding(NUM_TEXT_TOKENS, d_model)
        self.ar_audio_embedding = nn.Embedding(NUM_AUDIO_TOKENS + 1, d_model)
        self.ar_text_position = SinePositionalEmbedding(d_model, scale=False)
        self.ar_audio_position = SinePositionalEmbedding(d_model, scale=False)
        self.ar_decoder = nn.ModuleList(DecoderLayer(d_model, nhead) for _ in range(num_layers))
        self.norm = nn.LayerNorm(d_model)
        self.ar_predict_layer = nn.Linear(d_model, NUM_AUDIO_TOKENS + 1, bias=False)

    @staticmethod
    def pad_y_eos(y, y_mask_int, eos_id):
        targets = F.pad(y, (0, 1), value=0) + eos_id * F.pad(y_mask_int, (0, 1), value=1)
        return targets[:, :-1], targets[:, 1:]

    def _decode(self, x, y, xy_padding_mask=None):
        x_len, y_len = x.size(1), y.size(1)
        xy_pos = torch.concat([x, y], dim=1)
        attn_mask = build_xy_attn_mask(x_len, y_len, x.device)
        for layer in self.ar_decoder:
            xy_pos = layer(xy_pos, attn_mask, key_padding_mask=xy_padding_mask)
        return self.ar_predict_layer(self.norm(xy_pos[:, x_len:]))

    def forward(self, x, x_lens, codes, y_lens):
        x_mask = make_pad_mask(x_lens, x.size(1))
        y_mask = make_pad_mask(y_lens, codes.size(1))
        y_mask_int = y_mask.type(torch.int64)
        codes = codes.type(torch.int64) * (1 - y_mask_int)
        y, targets = self.pad_y_eos(codes, y_mask_int, eos_id=EOS)
        x = self.ar_text_position(self.ar_text_embedding(x))
        y_emb = self.ar_audio_position(self.ar_audio_embedding(y))
        logits = self._decode(x, y_emb, torch.concat([x_mask, y_mask], dim=1))
        targets = targets.masked_fill(y_mask, -100)
        loss = F.cross_entropy(logits.transpose(1, 2), targets, ignore_index=-100, reduction="sum")
        top1 = (logits.argmax(-1) == targets) & (targets != -100)
        return loss, top1.sum().item() / (targets != -100).sum().item()

    @torch.no_grad()
    def inference(self, text, prompts, top_k: int = 4, max_steps: int = 40):
        x = self.ar_text_position(self.ar_text_embedding(text))
        y = prompts
        prefix_len = y.size(1)
        for _ in range(max_steps):
            logits = self._decode(x, self.ar_audio_position(self.ar_audio_embedding(y)))[:, -1]
            values, indices = logits.topk(top_k, dim=-1)
            probs = torch.softmax(values, dim=-1)
            samples = indices.gather(-1, torch.multinomial(probs, 1))
            if samples[0, 0] == EOS or (y.size(1) - prefix_len) > max_steps - 2:
                break
            y = torch.concat([y, samples], dim=1)
        return y[:, prefix_len:]


if __name__ == "__main__":
    torch.manual_seed(0)
    model = VALLEAR()
    opt = torch.optim.AdamW(model.parameters(), lr=5e-4)
    x_lens = torch.tensor([12, 9, 7])
    y_lens = torch.tensor([30, 22, 25])
    x = torch.randint(1, NUM_TEXT_TOKENS, (3, int(x_lens.max())))
    codes = torch.randint(0, NUM_AUDIO_TOKENS, (3, int(y_lens.max())))
    x = x.masked_fill(make_pad_mask(x_lens), 0)
    for step in range(3):
        loss, acc = model(x, x_lens, codes, y_lens)
        opt.zero_grad()
        (loss / y_lens.sum()).backward()
        opt.step()
        print(f"step {step} loss {loss.item() / y_lens.sum().item():.4f} top1 {acc:.3f}")
    model.eval()
    prompt_text, target_text = x[:1, :5], x[:1, 5:12]
    generated = model.inference(torch.concat([prompt_text, target_text], dim=1), codes[:1, :6])
    print("generated codes", generated.shape[1], generated[0, :8].tolist())
