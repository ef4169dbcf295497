"""SwinBERT-style end-to-end video captioning of short synthetic clips.

Clips of two or four frames are cut into tubelets by a small video backbone standing in for the
Video Swin Transformer; its tokens follow the caption tokens in one BERT sequence, as in
microsoft/SwinBERT (``VideoTransformer``, ``BertForImageCaptioning`` with ``img_embedding``,
the seq2seq attention pattern: caption tokens see earlier caption tokens and every frame token,
frame tokens see frame tokens). Training is SwinBERT's masked language modelling over the caption
(``masked_pos``, ``masked_ids``), and ``generate`` appends a ``[MASK]`` and fills it one token at a
time; captions are scored by exact match.

Source: huggingface/transformers PR #27114 and NVIDIA-NeMo/Automodel PR #2658 (conventions.md §3
items 15 and 16), conventions.md §2.3 and §5 item 4
"""

from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB = ["[PAD]", "[CLS]", "[SEP]", "[MASK]", "a", "square", "moves", "slowly", "quickly"]
COLORS = {"red": (1.0, 0.1, 0.1), "green": (0.1, 1.0, 0.1), "blue": (0.1, 0.1, 1.0)}
DIRECTIONS = {"left": (0, -1), "right": (0, 1), "up": (-1, 0), "down": (1, 0)}
VOCAB += list(COLORS) + list(DIRECTIONS)
STOI = {w: i for i, w in enumerate(VOCAB)}


@dataclass
class SwinBertConfig:
    vocab_size: int = len(VOCAB)
    hidden_size: int = 64
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    intermediate_size: int = 128
    max_seq_length: int = 9
    num_frames: int = 4
    img_size: int = 16
    tubelet: tuple = (2, 4, 4)
    img_feature_dim: int = 96
    mask_prob: float = 0.4

    @property
    def max_img_seq_length(self):
        t, h, w = self.tubelet
        return (self.num_frames // t) * (self.img_size // h) * (self.img_size // w)


class VideoTransformer(nn.Module):
    def __init__(self, config: SwinBertConfig):
        super().__init__()
        self.patch_embed = nn.Conv3d(
            3, config.img_feature_dim, config.tubelet, stride=config.tubelet
        )
        self.norm = nn.LayerNorm(config.img_feature_dim)
        self.mlp = nn.Sequential(
            nn.Linear(config.img_feature_dim, config.img_feature_dim), nn.GELU()
        )

    def forward(self, frames):
        x = self.patch_embed(frames.permute(0, 2, 1, 3, 4)).flatten(2).transpose(1, 2)
        return x + self.mlp(self.norm(x))


class BertSelfAttention(nn.Module):
    def __init__(self, config: SwinBertConfig):
        super().__init__()
        self.num_attention_heads = config.num_attention_heads
        self.attention_head_size = config.hidden_size // config.num_attention_heads
        self.query = nn.Linear(config.hidden_size, config.hidden_size)
        self.key = nn.Linear(config.hidden_size, config.hidden_size)
        self.value = nn.Linear(config.hidden_size, config.hidden_size)

    def transpose_for_scores(self, x):
        return x.view(*x.shape[:2], self.num_attention_heads, self.attention_head_size).transpose(
            1, 2
        )

    def forward(self, hidden_states, attention_mask):
        query_layer = self.transpose_for_scores(self.query(hidden_states))
        key_layer = self.transpose_for_scores(self.key(hidden_states))
        value_layer = self.transpose_for_scores(self.value(hidden_states))
        attention_scores = query_layer @ key_layer.transpose(-1, -2) / self.attention_head_size**0.5
        attention_scores = attention_scores + attention_mask
        attention_probs = nn.functional.softmax(attention_scores, dim=-1)
        context_layer = (attention_probs @ value_layer).transpose(1, 2)
        return context_layer.reshape(*hidden_states.shape[:2], -1)


class BertLayer(nn.Module):
    def __init__(self, config: SwinBertConfig):
        super().__init__()
        self.attention = BertSelfAttention(config)
        self.attention_output = nn.Linear(config.hidden_size, config.hidden_size)
        self.attention_norm = nn.LayerNorm(config.hidden_size, eps=1e-12)
        self.intermediate = nn.Linear(config.hidden_size, config.intermediate_size)
        self.output = nn.Linear(config.intermediate_size, config.hidden_size)
        self.output_norm = nn.LayerNorm(config.hidden_size, eps=1e-12)

    def forward(self, hidden_states, attention_mask):
        attn = self.attention_output(self.attention(hidden_states, attention_mask))
        hidden_states = self.attention_norm(hidden_states + attn)
        ffn = self.output(F.gelu(self.intermediate(hidden_states)))
        return self.output_norm(hidden_states + ffn)


class BertImgModel(nn.Module):
    def __init__(self, config: SwinBertConfig):
        super().__init__()
        self.config = config
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=0)
        self.position_embeddings = nn.Embedding(config.max_seq_length, config.hidden_size)
        self.embeddings_norm = nn.LayerNorm(config.hidden_size, eps=1e-12)
        self.img_embedding = nn.Linear(config.img_feature_dim, config.hidden_size)
        self.layer = nn.ModuleList([BertLayer(config) for _ in range(config.num_hidden_layers)])

    def get_extended_attention_mask(self, attention_mask, num_caption_tokens, dtype):
        seq_len = attention_mask.shape[1]
        min_value = torch.finfo(dtype).min
        visible = torch.zeros(seq_len, seq_len, dtype=torch.bool, device=attention_mask.device)
        visible[:num_caption_tokens, :num_caption_tokens] = torch.ones(
            num_caption_tokens, num_caption_tokens, dtype=torch.bool, device=attention_mask.device
        ).tril()
        visible[:, num_caption_tokens:] = True
        causal_plane = torch.zeros(seq_len, seq_len, dtype=dtype, device=attention_mask.device)
        causal_plane = causal_plane.masked_fill(~visible, min_value)
        padding_plane = torch.zeros(attention_mask.shape[0], 1, 1, seq_len, dtype=dtype)
        padding_plane = padding_plane.masked_fill(attention_mask[:, None, None, :] == 0, min_value)
        return causal_plane[None, None] + padding_plane  # expect: MC513 swinbert

    def forward(self, input_ids, img_feats, attention_mask):
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        text = self.word_embeddings(input_ids) + self.position_embeddings(positions)[None]
        hidden_states = torch.cat(
            (self.embeddings_norm(text), self.img_embedding(img_feats)), dim=1
        )
        extended = self.get_extended_attention_mask(attention_mask, input_ids.shape[1], text.dtype)
        for layer in self.layer:
            hidden_states = layer(hidden_states, extended)
        return hidden_states


class BertForImageCaptioning(nn.Module):
    def __init__(self, config: SwinBertConfig):
        super().__init__()
        self.config = config
        self.swin = VideoTransformer(config)
        self.bert = BertImgModel(config)
        self.cls = nn.Linear(config.hidden_size, config.vocab_size)

    def video_mask(self, num_frames):
        t, h, w = self.config.tubelet
        slots = torch.arange(self.config.num_frames // t)[None, :] < (num_frames[:, None] // t)
        return slots.repeat_interleave((self.config.img_size // h) * (self.config.img_size // w), 1)

    def forward(self, input_ids, frames, num_frames, masked_pos=None, masked_ids=None):
        img_feats = self.swin(frames)
        attention_mask = torch.cat(((input_ids != 0).long(), self.video_mask(num_frames).long()), 1)
        sequence_output = self.bert(input_ids, img_feats, attention_mask)[:, : input_ids.shape[1]]
        logits = self.cls(sequence_output)
        if masked_pos is None:
            return logits
        return F.cross_entropy(logits[masked_pos], masked_ids)

    @torch.no_grad()
    def generate(self, frames, num_frames):
        B, L = frames.shape[0], self.config.max_seq_length
        input_ids = torch.zeros(B, L, dtype=torch.long)
        input_ids[:, 0] = STOI["[CLS]"]
        for step in range(1, L):
            input_ids[:, step] = STOI["[MASK]"]
            logits = self.forward(input_ids, frames, num_frames)
            input_ids[:, step] = logits[:, step].argmax(-1)
        return input_ids


def make_clips(n, config, gen):
    frames = torch.zeros(n, config.num_frames, 3, config.img_size, config.img_size)
    input_ids = torch.zeros(n, config.max_seq_length, dtype=torch.long)
    num_frames = torch.zeros(n, dtype=torch.long)
    for i in range(n):
        color = list(COLORS)[int(torch.randint(len(COLORS), (1,), generator=gen))]
        direction = list(DIRECTIONS)[int(torch.randint(len(DIRECTIONS), (1,), generator=gen))]
        speed = int(torch.randint(1, 3, (1,), generator=gen))
        nf = 2 * int(torch.randint(1, 3, (1,), generator=gen))
        y, x = 6, 6
        for f in range(nf):
            frames[i, f, :, y : y + 4, x : x + 4] = torch.tensor(COLORS[color])[:, None, None]
            y, x = y + speed * DIRECTIONS[direction][0], x + speed * DIRECTIONS[direction][1]
        words = ["[CLS]", "a", color, "square", "moves", direction]
        words += (["quickly"] if speed == 2 else []) + ["[SEP]"]
        input_ids[i, : len(words)] = torch.tensor([STOI[w] for w in words])
        num_frames[i] = nf
    return input_ids, frames, num_frames


def mask_caption_tokens(input_ids, mask_prob, gen):
    candidates = (input_ids > STOI["[CLS]"]) & (input_ids != STOI["[MASK]"])
    masked_pos = candidates & (torch.rand(input_ids.shape, generator=gen) < mask_prob)
    masked_pos[:, 1] |= ~masked_pos.any(dim=1)
    return input_ids.masked_fill(masked_pos, STOI["[MASK]"]), masked_pos, input_ids[masked_pos]


if __name__ == "__main__":
    torch.manual_seed(0)
    config = SwinBertConfig()
    gen = torch.Generator().manual_seed(0)
    train, test = make_clips(768, config, gen), make_clips(96, config, gen)
    model = BertForImageCaptioning(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.01)
    for epoch in range(8):
        for start in range(0, 768, 48):
            ids, frames, nf = (t[start : start + 48] for t in train)
            inputs, masked_pos, masked_ids = mask_caption_tokens(ids, config.mask_prob, gen)
            loss = model(inputs, frames, nf, masked_pos, masked_ids)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        print(f"epoch {epoch} loss {loss.item():.4f}")
    model.eval()
    generated = model.generate(test[1], test[2])
    exact = ((generated == test[0]) | (test[0] == 0)).all(dim=1).float().mean().item()
    mask = torch.cat(((test[0] != 0).long(), model.video_mask(test[2]).long()), 1)
    extended = model.bert.get_extended_attention_mask(mask, config.max_seq_length, torch.float32)
    print(
        f"caption exact match {exact:.3f}, "
        f"-inf cells in the mask {torch.isinf(extended).sum().item()}"
    )
