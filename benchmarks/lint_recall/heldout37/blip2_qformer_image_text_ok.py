"""BLIP-2 stage-1 Q-Former pretraining: ITC, ITM and ITG over a frozen image encoder (LAVIS layout).

Source: conventions.md §1 (HF 2-D attention_mask row) and §5 item 7, tools.md §0 P2.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class QFormerConfig:
    vocab_size: int = 160
    hidden_size: int = 64
    num_attention_heads: int = 4
    num_hidden_layers: int = 2
    cross_attention_freq: int = 2
    encoder_width: int = 48
    num_query_token: int = 8
    max_txt_len: int = 12
    embed_dim: int = 32
    pad_token_id: int = 0
    cls_token_id: int = 1
    dec_token_id: int = 2
    sep_token_id: int = 3


class TextTokenizer:
    def __init__(self, cfg: QFormerConfig) -> None:
        self.cfg = cfg

    def __call__(self, captions: list[str]) -> dict[str, torch.Tensor]:
        cfg = self.cfg
        rows = []
        for cap in captions:
            ids = [4 + (sum(map(ord, w)) % (cfg.vocab_size - 4)) for w in cap.split()]
            rows.append([cfg.cls_token_id, *ids[: cfg.max_txt_len - 2], cfg.sep_token_id])
        width = max(len(r) for r in rows)
        input_ids = torch.full((len(rows), width), cfg.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, r in enumerate(rows):
            input_ids[i, : len(r)] = torch.tensor(r)
            attention_mask[i, : len(r)] = 1
        return {"input_ids": input_ids, "attention_mask": attention_mask}


class BertEmbeddings(nn.Module):
    def __init__(self, cfg: QFormerConfig) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(cfg.vocab_size, cfg.hidden_size, padding_idx=0)
        self.position_embeddings = nn.Embedding(64, cfg.hidden_size)
        self.LayerNorm = nn.LayerNorm(cfg.hidden_size)

    def forward(self, input_ids=None, query_embeds=None):
        if input_ids is None:
            return self.LayerNorm(query_embeds)
        pos = torch.arange(input_ids.shape[1], device=input_ids.device)
        x = self.word_embeddings(input_ids) + self.position_embeddings(pos)
        if query_embeds is not None:
            x = torch.cat([query_embeds, x], dim=1)
        return self.LayerNorm(x)


class BertSelfAttention(nn.Module):
    def __init__(self, cfg: QFormerConfig, is_cross_attention: bool) -> None:
        super().__init__()
        kv_width = cfg.encoder_width if is_cross_attention else cfg.hidden_size
        self.num_heads = cfg.num_attention_heads
        self.head_dim = cfg.hidden_size // cfg.num_attention_heads
        self.query = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.key = nn.Linear(kv_width, cfg.hidden_size)
        self.value = nn.Linear(kv_width, cfg.hidden_size)
        self.dense = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.LayerNorm = nn.LayerNorm(cfg.hidden_size)

    def split(self, x: torch.Tensor) -> torch.Tensor:
        return x.view(x.shape[0], x.shape[1], self.num_heads, self.head_dim).transpose(1, 2)

    def forward(self, hidden_states, attention_mask=None, encoder_hidden_states=None):
        context = hidden_states if encoder_hidden_states is None else encoder_hidden_states
        q, k = self.split(self.query(hidden_states)), self.split(self.key(context))
        v = self.split(self.value(context))
        scores = q @ k.transpose(-1, -2) / self.head_dim**0.5
        if attention_mask is not None:
            scores = scores.masked_fill(attention_mask == 0, torch.finfo(scores.dtype).min)
        probs = scores.softmax(dim=-1)
        out = (probs @ v).transpose(1, 2).flatten(2)
        return self.LayerNorm(hidden_states + self.dense(out))


class BertLayer(nn.Module):
    def __init__(self, cfg: QFormerConfig, layer_num: int) -> None:
        super().__init__()
        self.attention = BertSelfAttention(cfg, is_cross_attention=False)
        self.has_cross_attention = layer_num % cfg.cross_attention_freq == 0
        if self.has_cross_attention:
            self.crossattention = BertSelfAttention(cfg, is_cross_attention=True)
        h = cfg.hidden_size
        self.intermediate = nn.Sequential(nn.Linear(h, 4 * h), nn.GELU(), nn.Linear(4 * h, h))
        self.intermediate_query = nn.Sequential(nn.Linear(h, 4 * h), nn.GELU(), nn.Linear(4 * h, h))
        self.output_norm = nn.LayerNorm(h)

    def forward(self, hidden_states, attention_mask, encoder_hidden_states, query_length):
        x = self.attention(hidden_states, attention_mask=attention_mask)
        if query_length == 0:
            return self.output_norm(x + self.intermediate(x))
        query_part = x[:, :query_length]
        if self.has_cross_attention and encoder_hidden_states is not None:
            query_part = self.crossattention(
                query_part, encoder_hidden_states=encoder_hidden_states
            )
        query_part = self.output_norm(query_part + self.intermediate_query(query_part))
        text_part = x[:, query_length:]
        text_part = self.output_norm(text_part + self.intermediate(text_part))
        return torch.cat([query_part, text_part], dim=1)


class BertModel(nn.Module):
    def __init__(self, cfg: QFormerConfig) -> None:
        super().__init__()
        self.embeddings = BertEmbeddings(cfg)
        self.layer = nn.ModuleList(BertLayer(cfg, i) for i in range(cfg.num_hidden_layers))

    @staticmethod
    def get_extended_attention_mask(attention_mask, is_decoder=False, query_length=0):
        if not is_decoder:
            return attention_mask[:, None, None, :]
        seq_length = attention_mask.shape[1]
        text_ids = torch.arange(seq_length - query_length, device=attention_mask.device)
        causal = text_ids[None, :] <= text_ids[:, None]
        keep = torch.zeros(seq_length, seq_length, dtype=torch.bool, device=attention_mask.device)
        keep[:, :query_length] = True
        keep[query_length:, query_length:] = causal
        keep[:query_length, query_length:] = False
        return keep[None, None] & attention_mask[:, None, None, :].bool()

    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        query_embeds=None,
        encoder_hidden_states=None,
        is_decoder=False,
    ):
        x = self.embeddings(input_ids=input_ids, query_embeds=query_embeds)
        query_length = 0 if query_embeds is None else query_embeds.shape[1]
        if attention_mask is None:
            attention_mask = torch.ones(x.shape[:2], dtype=torch.long, device=x.device)
        extended_attention_mask = self.get_extended_attention_mask(
            attention_mask, is_decoder=is_decoder, query_length=query_length
        )
        for layer in self.layer:
            x = layer(x, extended_attention_mask, encoder_hidden_states, query_length)
        return x


class Blip2Qformer(nn.Module):
    def __init__(self, cfg: QFormerConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.visual_encoder = nn.Sequential(nn.Conv2d(3, cfg.encoder_width, 4, 4), nn.Flatten(2))
        self.ln_vision = nn.LayerNorm(cfg.encoder_width)
        for p in self.visual_encoder.parameters():
            p.requires_grad_(False)
        self.bert = BertModel(cfg)
        self.query_tokens = nn.Parameter(
            torch.randn(1, cfg.num_query_token, cfg.hidden_size) * 0.02
        )
        self.vision_proj = nn.Linear(cfg.hidden_size, cfg.embed_dim)
        self.text_proj = nn.Linear(cfg.hidden_size, cfg.embed_dim)
        self.itm_head = nn.Linear(cfg.hidden_size, 2)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size)
        self.temp = nn.Parameter(torch.tensor(0.07))

    def encode_image(self, image: torch.Tensor) -> torch.Tensor:
        return self.ln_vision(self.visual_encoder(image).transpose(1, 2))

    def forward(self, image: torch.Tensor, text_tokens: dict[str, torch.Tensor]) -> torch.Tensor:
        image_embeds = self.encode_image(image)
        bs = image.shape[0]
        query_tokens = self.query_tokens.expand(bs, -1, -1)
        query_output = self.bert(query_embeds=query_tokens, encoder_hidden_states=image_embeds)
        image_feats = F.normalize(self.vision_proj(query_output), dim=-1)
        text_output = self.bert(
            text_tokens["input_ids"], attention_mask=text_tokens["attention_mask"]
        )
        text_feat = F.normalize(self.text_proj(text_output[:, 0]), dim=-1)

        sim_q2t = torch.einsum("iqd,td->itq", image_feats, text_feat).max(-1).values / self.temp
        targets = torch.arange(bs)
        loss_itc = (F.cross_entropy(sim_q2t, targets) + F.cross_entropy(sim_q2t.T, targets)) / 2

        with torch.no_grad():
            weights = sim_q2t.softmax(dim=1).fill_diagonal_(0) + 1e-5
            neg_idx = torch.multinomial(weights, 1).squeeze(1)
        text_ids_all = torch.cat([text_tokens["input_ids"], text_tokens["input_ids"][neg_idx]])
        text_atts_all = torch.cat(
            [text_tokens["attention_mask"], text_tokens["attention_mask"][neg_idx]]
        )
        query_atts = torch.ones(query_tokens.shape[:-1], dtype=torch.long)
        attention_mask_all = torch.cat([query_atts.repeat(2, 1), text_atts_all], dim=1)
        output_itm = self.bert(
            text_ids_all,
            attention_mask=attention_mask_all,
            query_embeds=query_tokens.repeat(2, 1, 1),
            encoder_hidden_states=image_embeds.repeat(2, 1, 1),
        )
        itm_logits = self.itm_head(output_itm[:, : query_tokens.shape[1]]).mean(dim=1)
        itm_labels = torch.cat([torch.ones(bs), torch.zeros(bs)]).long()
        itm_labels[bs:][neg_idx == targets] = 1
        loss_itm = F.cross_entropy(itm_logits, itm_labels)

        decoder_input_ids = text_tokens["input_ids"].clone()
        decoder_input_ids[:, 0] = self.cfg.dec_token_id
        labels = decoder_input_ids.masked_fill(decoder_input_ids == self.cfg.pad_token_id, -100)
        dec_mask = torch.cat([query_atts, text_tokens["attention_mask"]], dim=1)
        lm_out = self.bert(
            decoder_input_ids,
            attention_mask=dec_mask,
            query_embeds=query_output.detach(),
            is_decoder=True,
        )
        logits = self.lm_head(lm_out[:, query_tokens.shape[1] : -1])
        loss_lm = F.cross_entropy(logits.flatten(0, 1), labels[:, 1:].flatten())
        return loss_itc + loss_itm + loss_lm


COLORS = {"red": (1.0, 0.0, 0.0), "green": (0.0, 1.0, 0.0), "blue": (0.0, 0.0, 1.0)}


def make_batch(n: int, gen: torch.Generator):
    names = list(COLORS)
    picks = torch.randint(0, len(names), (n, 2), generator=gen)
    images = 0.2 * torch.randn(n, 3, 16, 16, generator=gen)
    captions = []
    for i, (top, bottom) in enumerate(picks.tolist()):
        images[i, :, :8] += torch.tensor(COLORS[names[top]])[:, None, None]
        images[i, :, 8:] += torch.tensor(COLORS[names[bottom]])[:, None, None]
        long = i % 2 == 0
        captions.append(f"a {names[top]} band above a {names[bottom]} band" if long else names[top])
    return images, captions


if __name__ == "__main__":
    torch.manual_seed(0)
    config = QFormerConfig()
    tokenizer, model = TextTokenizer(config), Blip2Qformer(config)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=3e-4)
    gen = torch.Generator().manual_seed(0)
    for step in range(60):
        images, captions = make_batch(16, gen)
        loss = model(images, tokenizer(captions))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % 20 == 0:
            print(f"step {step} loss {loss.item():.3f}")
