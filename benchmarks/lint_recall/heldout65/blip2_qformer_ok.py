"""
BLIP-2 stage-one Q-Former (Li et al., 2023): learned queries and caption
tokens share one BERT-like encoder; queries cross-attend to frozen image
features. Three objectives with three attention layouts: image-text
contrastive (queries and text apart), image-text matching (bidirectional) and
image-grounded text generation (queries bidirectional, text causal).

Source: rasbt/LLMs-from-scratch#1061 (conventions.md §3 item 14); conventions.md §1 (direction cheat-sheet, HF attention_mask row), §5 item 1
"""

from typing import Dict, List, Optional

import torch
import torch.nn.functional as F
from torch import nn, Tensor


def exists(val):
    return val is not None


class CharTokenizer:
    def __init__(self, vocab_size: int = 96, pad_token_id: int = 0, bos_token_id: int = 1, dec_token_id: int = 2, max_length: int = 24):
        self.vocab_size, self.pad_token_id, self.bos_token_id, self.dec_token_id = vocab_size, pad_token_id, bos_token_id, dec_token_id
        self.max_length = max_length

    def __call__(self, texts: List[str], padding: bool = True, return_tensors: str = 'pt') -> Dict[str, Tensor]:
        ids = [[self.bos_token_id] + [3 + ord(c) % (self.vocab_size - 3) for c in text][:self.max_length - 1] for text in texts]
        longest = max(map(len, ids))
        return {
            'input_ids': torch.tensor([seq + [self.pad_token_id] * (longest - len(seq)) for seq in ids]),
            'attention_mask': torch.tensor([[1] * len(seq) + [0] * (longest - len(seq)) for seq in ids]),
        }


class Attention(nn.Module):
    def __init__(self, dim, heads=4, dropout=0.):
        super().__init__()
        self.heads = heads
        self.dropout = dropout
        self.to_q = nn.Linear(dim, dim)
        self.to_kv = nn.Linear(dim, dim * 2)
        self.to_out = nn.Linear(dim, dim)

    def forward(self, x, context=None, attn_mask=None):
        context = context if exists(context) else x
        b, n, _ = x.shape
        q, k, v = (self.to_q(x), *self.to_kv(context).chunk(2, dim=-1))
        q, k, v = map(lambda t: t.view(b, t.shape[1], self.heads, -1).transpose(1, 2), (q, k, v))
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=self.dropout if self.training else 0.)
        return self.to_out(out.transpose(1, 2).reshape(b, n, -1))


class QFormerLayer(nn.Module):
    def __init__(self, dim, heads, cross_attention=True):
        super().__init__()
        self.self_attn, self.self_norm = Attention(dim, heads), nn.LayerNorm(dim)
        self.cross_attn = Attention(dim, heads) if cross_attention else None
        self.cross_norm = nn.LayerNorm(dim)
        self.ff_text = nn.Sequential(nn.Linear(dim, dim * 4), nn.GELU(), nn.Linear(dim * 4, dim))
        self.ff_query = nn.Sequential(nn.Linear(dim, dim * 4), nn.GELU(), nn.Linear(dim * 4, dim))
        self.ff_norm_text, self.ff_norm_query = nn.LayerNorm(dim), nn.LayerNorm(dim)

    def forward(self, x, *, num_query, attn_mask=None, image_embeds=None):
        x = self.self_norm(self.self_attn(x, attn_mask=attn_mask) + x)
        queries, text = x[:, :num_query], x[:, num_query:]
        if num_query > 0 and exists(self.cross_attn) and exists(image_embeds):
            queries = self.cross_norm(self.cross_attn(queries, context=image_embeds) + queries)
        queries = self.ff_norm_query(self.ff_query(queries) + queries)
        text = self.ff_norm_text(self.ff_text(text) + text)
        return torch.cat((queries, text), dim=1)


class Blip2QFormer(nn.Module):
    def __init__(self, *, tokenizer: CharTokenizer, dim=32, image_dim=48, depth=2, heads=4, num_query_tokens=8, embed_dim=16, cross_attention_freq=2, max_positions=32):
        super().__init__()
        self.tokenizer = tokenizer
        self.num_query = num_query_tokens
        self.query_tokens = nn.Parameter(torch.randn(1, num_query_tokens, dim) * 0.02)
        self.word_emb = nn.Embedding(tokenizer.vocab_size, dim)
        self.pos_emb = nn.Embedding(max_positions, dim)
        self.image_proj_in = nn.Linear(image_dim, dim)
        self.layers = nn.ModuleList([QFormerLayer(dim, heads, cross_attention=(i % cross_attention_freq == 0)) for i in range(depth)])
        self.vision_proj, self.text_proj = nn.Linear(dim, embed_dim), nn.Linear(dim, embed_dim)
        self.itm_head = nn.Linear(dim, 2)
        self.lm_head = nn.Linear(dim, tokenizer.vocab_size)
        self.temp = nn.Parameter(torch.tensor(0.07))

    def embed(self, ids: Tensor) -> Tensor:
        return self.word_emb(ids) + self.pos_emb(torch.arange(ids.shape[1], device=ids.device))

    def qformer(self, x: Tensor, *, num_query: int, attn_mask: Optional[Tensor] = None, image_embeds: Optional[Tensor] = None) -> Tensor:
        for layer in self.layers:
            x = layer(x, num_query=num_query, attn_mask=attn_mask, image_embeds=image_embeds)
        return x

    def forward(self, image_feats: Tensor, captions: List[str]):
        text = self.tokenizer(captions, padding=True, return_tensors='pt')
        input_ids, attention_mask = text['input_ids'], text['attention_mask']
        pad = attention_mask == 0
        b, t, q = input_ids.shape[0], input_ids.shape[1], self.num_query
        image_embeds = self.image_proj_in(image_feats)
        query_tokens = self.query_tokens.expand(b, -1, -1)

        query_output = self.qformer(query_tokens, num_query=q, image_embeds=image_embeds)
        image_feat = F.normalize(self.vision_proj(query_output), dim=-1)
        text_output = self.qformer(self.embed(input_ids), num_query=0, attn_mask=~pad[:, None, None, :])
        text_feat = F.normalize(self.text_proj(text_output[:, 0]), dim=-1)

        sim_i2t = torch.einsum('i q d, j d -> i j q', image_feat, text_feat).amax(dim=-1) / self.temp
        targets = torch.arange(b)
        loss_itc = (F.cross_entropy(sim_i2t, targets) + F.cross_entropy(sim_i2t.t(), targets)) / 2

        query_keep = torch.ones((b, q), dtype=torch.bool)
        itm_keep = torch.cat((query_keep, attention_mask.bool()), dim=1)[:, None, None, :]
        itm_images = torch.cat((image_embeds, image_embeds.roll(1, dims=0)))
        itm_tokens = torch.cat((query_tokens, self.embed(input_ids)), dim=1).repeat(2, 1, 1)
        itm_output = self.qformer(itm_tokens, num_query=q, attn_mask=itm_keep.repeat(2, 1, 1, 1), image_embeds=itm_images)
        itm_logits = self.itm_head(itm_output[:, :q]).mean(dim=1)
        itm_labels = torch.cat((torch.ones(b, dtype=torch.long), torch.zeros(b, dtype=torch.long)))
        loss_itm = F.cross_entropy(itm_logits, itm_labels)

        decoder_ids = input_ids.clone()
        decoder_ids[:, 0] = self.tokenizer.dec_token_id
        itg_mask = torch.zeros((b, q + t, q + t), dtype=torch.bool)
        itg_mask[:, :q, :q] = True
        itg_mask[:, q:, :q] = True
        itg_mask[:, q:, q:] = torch.ones((t, t), dtype=torch.bool).tril() & ~pad[:, None, :]
        itg_output = self.qformer(torch.cat((query_tokens, self.embed(decoder_ids)), dim=1), num_query=q, attn_mask=itg_mask[:, None], image_embeds=image_embeds)
        labels = input_ids.masked_fill(pad, -100)
        lm_logits = self.lm_head(itg_output[:, q:-1])
        loss_lm = F.cross_entropy(lm_logits.transpose(1, 2), labels[:, 1:], ignore_index=-100)

        return loss_itc, loss_itm, loss_lm


if __name__ == '__main__':
    torch.manual_seed(0)
    model = Blip2QFormer(tokenizer=CharTokenizer())
    image_feats = torch.randn(3, 10, 48)
    captions = ['a dog on a red sofa', 'two cats', 'a boat near the pier at dusk']
    loss_itc, loss_itm, loss_lm = model(image_feats, captions)
    (loss_itc + loss_itm + loss_lm).backward()
    print('itc', round(loss_itc.item(), 4), 'itm', round(loss_itm.item(), 4), 'lm', round(loss_lm.item(), 4))
