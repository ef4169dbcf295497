"""Contrastive language-audio pretraining (LAION-CLAP layout) on AudioCaps-style pairs.

An audio tower over log-mel frames of variable duration and a RoBERTa-like
text tower, each with an MLP projection, trained with the two-scale CLAP loss
and evaluated by text-to-audio recall.

Source: conventions.md §1 (direction cheat-sheet; nn.Transformer and HF attention_mask rows), §5 item 1; seed self_attention_mask_guide.txt §2, §7 Q1.
"""
import math

import torch
import torch.nn.functional as F
from torch import nn

N_MELS = 32
HOP_PATCH = 4


class RobertaLikeTokenizer:
    pad_token_id, bos_token_id, eos_token_id = 1, 0, 2

    def __init__(self, vocab_size=300, model_max_length=20):
        self.vocab_size = vocab_size
        self.model_max_length = model_max_length

    def __call__(self, texts, padding=True, truncation=True, return_tensors="pt"):
        rows = []
        for text in texts:
            ids = [3 + sum(map(ord, w)) % (self.vocab_size - 3) for w in text.lower().split()]
            rows.append([self.bos_token_id] + ids[: self.model_max_length - 2] + [self.eos_token_id])
        width = max(map(len, rows))
        input_ids = torch.full((len(rows), width), self.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros(len(rows), width, dtype=torch.long)
        for i, row in enumerate(rows):
            input_ids[i, : len(row)] = torch.tensor(row)
            attention_mask[i, : len(row)] = 1
        return {"input_ids": input_ids, "attention_mask": attention_mask}


class AudioBlock(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, dim * 4), nn.GELU(), nn.Linear(dim * 4, dim))

    def forward(self, x, frame_keep):
        b, n, c = x.shape
        qkv = self.qkv(self.norm1(x)).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=frame_keep[:, None, None, :])
        x = x + self.proj(out.transpose(1, 2).reshape(b, n, c))
        return x + self.mlp(self.norm2(x))


class AudioEncoder(nn.Module):
    def __init__(self, dim=48, depth=2, heads=4, max_patches=64):
        super().__init__()
        self.patch_embed = nn.Conv1d(N_MELS, dim, kernel_size=HOP_PATCH, stride=HOP_PATCH)
        self.pos_embed = nn.Parameter(torch.zeros(1, max_patches, dim))
        self.blocks = nn.ModuleList([AudioBlock(dim, heads) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)

    def forward(self, mel, mel_lengths):
        x = self.patch_embed(mel.transpose(1, 2)).transpose(1, 2)
        n = x.shape[1]
        x = x + self.pos_embed[:, :n]
        patch_lengths = torch.div(mel_lengths + HOP_PATCH - 1, HOP_PATCH, rounding_mode="floor")
        frame_keep = torch.arange(n, device=mel.device)[None, :] < patch_lengths[:, None]
        for blk in self.blocks:
            x = blk(x, frame_keep)
        x = self.norm(x)
        w = frame_keep.unsqueeze(-1).to(x.dtype)
        return (x * w).sum(1) / w.sum(1).clamp(min=1.0)


class TextEncoder(nn.Module):
    def __init__(self, vocab_size, dim=48, depth=2, heads=4, max_len=32):
        super().__init__()
        self.embeddings = nn.Embedding(vocab_size, dim, padding_idx=1)
        self.position_embeddings = nn.Embedding(max_len, dim)
        layer = nn.TransformerEncoderLayer(dim, heads, dim * 4, dropout=0.0, activation="gelu", batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        self.ln = nn.LayerNorm(dim)

    def forward(self, input_ids, attention_mask):
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        x = self.embeddings(input_ids) + self.position_embeddings(positions)[None]
        x = self.encoder(x, src_key_padding_mask=attention_mask.bool())  # expect: MC502 kpm
        return self.ln(x[:, 0, :])


class CLAP(nn.Module):
    def __init__(self, vocab_size, dim=48, joint_embed_shape=32):
        super().__init__()
        self.audio_branch = AudioEncoder(dim)
        self.text_branch = TextEncoder(vocab_size, dim)
        self.audio_projection = nn.Sequential(nn.Linear(dim, joint_embed_shape), nn.ReLU(), nn.Linear(joint_embed_shape, joint_embed_shape))
        self.text_projection = nn.Sequential(nn.Linear(dim, joint_embed_shape), nn.ReLU(), nn.Linear(joint_embed_shape, joint_embed_shape))
        self.logit_scale_a = nn.Parameter(torch.ones([]) * math.log(1 / 0.07))
        self.logit_scale_t = nn.Parameter(torch.ones([]) * math.log(1 / 0.07))

    def get_audio_embedding(self, audio):
        return F.normalize(self.audio_projection(self.audio_branch(audio["mel"], audio["mel_lengths"])), dim=-1)

    def get_text_embedding(self, text):
        return F.normalize(self.text_projection(self.text_branch(**text)), dim=-1)

    def forward(self, audio, text):
        return self.get_audio_embedding(audio), self.get_text_embedding(text), self.logit_scale_a.exp(), self.logit_scale_t.exp()


def clap_loss(audio_features, text_features, logit_scale_a, logit_scale_t):
    labels = torch.arange(audio_features.shape[0], device=audio_features.device)
    logits_per_audio = logit_scale_a * audio_features @ text_features.T
    logits_per_text = logit_scale_t * text_features @ audio_features.T
    return (F.cross_entropy(logits_per_audio, labels) + F.cross_entropy(logits_per_text, labels)) / 2


def collate_audio(waveforms_as_mel):
    lengths = torch.tensor([m.shape[0] for m in waveforms_as_mel])
    width = int(math.ceil(lengths.max().item() / HOP_PATCH) * HOP_PATCH)
    mel = torch.zeros(len(waveforms_as_mel), width, N_MELS)
    for i, m in enumerate(waveforms_as_mel):
        mel[i, : m.shape[0]] = m
    return {"mel": mel, "mel_lengths": lengths}


@torch.no_grad()
def text_to_audio_recall(model, audio, text, k=1):
    model.eval()
    a, t, _, _ = model(audio, text)
    topk = (t @ a.T).topk(k, dim=-1).indices
    return (topk == torch.arange(len(topk))[:, None]).any(-1).float().mean().item()


if __name__ == "__main__":
    torch.manual_seed(0)
    tokenizer = RobertaLikeTokenizer()
    captions = ["a dog barks while cars pass by on a wet road", "rain falls", "a man speaks and a bell rings"]
    mels = [torch.randn(37, N_MELS), torch.randn(22, N_MELS), torch.randn(50, N_MELS)]
    audio = collate_audio(mels)
    text = tokenizer(captions, padding=True, return_tensors="pt")
    model = CLAP(tokenizer.vocab_size)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(3):
        model.train()
        loss = clap_loss(*model(audio, text))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"step {step} loss {loss.item():.4f}")
    print("t2a R@1", text_to_audio_recall(model, audio, text))
