"""PyTorch tutorial "Language Translation with nn.Transformer and torchtext", masks retyped (correct twin).

The tutorial's `Seq2SeqTransformer` (sequence-first `nn.Transformer`), `generate_square_subsequent_mask`,
`create_mask` with `PAD_IDX` padding masks (True = pad), `train_epoch` and `greedy_decode`, on a
toy "reverse the sentence" corpus. The learner left out `.transpose(0, 1)`: `triu(ones) == 1` is
True on and above the diagonal, so `masked_fill(mask == 0, float('-inf'))` blocks the past and
every target position sees all later tokens; position 0's logits move when a later token changes.

Twin: keeps the tutorial's `.transpose(0, 1)`.

Source: pytorch/pytorch#29546 (flipped look-ahead attention mask in
`generate_square_subsequent_mask`: -inf below the diagonal instead of above); conventions.md §3 item 9.
"""
import math

import torch
import torch.nn as nn
from torch import Tensor
from torch.nn import Transformer

DEVICE = torch.device('cpu')
UNK_IDX, PAD_IDX, BOS_IDX, EOS_IDX = 0, 1, 2, 3


class PositionalEncoding(nn.Module):
    def __init__(self, emb_size: int, dropout: float, maxlen: int = 500):
        super(PositionalEncoding, self).__init__()
        den = torch.exp(- torch.arange(0, emb_size, 2) * math.log(10000) / emb_size)
        pos = torch.arange(0, maxlen).reshape(maxlen, 1)
        pos_embedding = torch.zeros((maxlen, emb_size))
        pos_embedding[:, 0::2] = torch.sin(pos * den)
        pos_embedding[:, 1::2] = torch.cos(pos * den)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer('pos_embedding', pos_embedding.unsqueeze(-2))

    def forward(self, token_embedding: Tensor):
        return self.dropout(token_embedding + self.pos_embedding[:token_embedding.size(0), :])


class TokenEmbedding(nn.Module):
    def __init__(self, vocab_size: int, emb_size):
        super(TokenEmbedding, self).__init__()
        self.embedding = nn.Embedding(vocab_size, emb_size)
        self.emb_size = emb_size

    def forward(self, tokens: Tensor):
        return self.embedding(tokens.long()) * math.sqrt(self.emb_size)


class Seq2SeqTransformer(nn.Module):
    def __init__(self, num_encoder_layers, num_decoder_layers, emb_size, nhead, src_vocab_size,
                 tgt_vocab_size, dim_feedforward=512, dropout=0.1):
        super(Seq2SeqTransformer, self).__init__()
        self.transformer = Transformer(d_model=emb_size, nhead=nhead, num_encoder_layers=num_encoder_layers,
                                       num_decoder_layers=num_decoder_layers,
                                       dim_feedforward=dim_feedforward, dropout=dropout)
        self.generator = nn.Linear(emb_size, tgt_vocab_size)
        self.src_tok_emb = TokenEmbedding(src_vocab_size, emb_size)
        self.tgt_tok_emb = TokenEmbedding(tgt_vocab_size, emb_size)
        self.positional_encoding = PositionalEncoding(emb_size, dropout=dropout)

    def forward(self, src, trg, src_mask, tgt_mask, src_padding_mask, tgt_padding_mask, memory_key_padding_mask):
        src_emb = self.positional_encoding(self.src_tok_emb(src))
        tgt_emb = self.positional_encoding(self.tgt_tok_emb(trg))
        outs = self.transformer(src_emb, tgt_emb, src_mask, tgt_mask, None,
                                src_padding_mask, tgt_padding_mask, memory_key_padding_mask)
        return self.generator(outs)

    def encode(self, src: Tensor, src_mask: Tensor):
        return self.transformer.encoder(self.positional_encoding(self.src_tok_emb(src)), src_mask)

    def decode(self, tgt: Tensor, memory: Tensor, tgt_mask: Tensor):
        return self.transformer.decoder(self.positional_encoding(self.tgt_tok_emb(tgt)), memory, tgt_mask)


def generate_square_subsequent_mask(sz):
    mask = (torch.triu(torch.ones((sz, sz), device=DEVICE)) == 1).transpose(0, 1)
    mask = mask.float().masked_fill(mask == 0, float('-inf')).masked_fill(mask == 1, float(0.0))
    return mask


def create_mask(src, tgt):
    src_seq_len, tgt_seq_len = src.shape[0], tgt.shape[0]
    tgt_mask = generate_square_subsequent_mask(tgt_seq_len).type(torch.bool)  # same type as the padding masks
    src_mask = torch.zeros((src_seq_len, src_seq_len), device=DEVICE).type(torch.bool)
    src_padding_mask = (src == PAD_IDX).transpose(0, 1)
    tgt_padding_mask = (tgt == PAD_IDX).transpose(0, 1)
    return src_mask, tgt_mask, src_padding_mask, tgt_padding_mask


def greedy_decode(model, src, src_mask, max_len, start_symbol):
    memory = model.encode(src, src_mask)
    ys = torch.ones(1, 1).fill_(start_symbol).type(torch.long).to(DEVICE)
    for i in range(max_len - 1):
        tgt_mask = (generate_square_subsequent_mask(ys.size(0)).type(torch.bool)).to(DEVICE)
        out = model.decode(ys, memory, tgt_mask).transpose(0, 1)
        next_word = torch.max(model.generator(out[:, -1]), dim=1)[1].item()
        ys = torch.cat([ys, torch.ones(1, 1).type_as(src.data).fill_(next_word)], dim=0)
        if next_word == EOS_IDX:
            break
    return ys


if __name__ == "__main__":
    torch.manual_seed(0)
    model = Seq2SeqTransformer(2, 2, emb_size=32, nhead=4, src_vocab_size=12, tgt_vocab_size=12, dim_feedforward=64)
    loss_fn = torch.nn.CrossEntropyLoss(ignore_index=PAD_IDX)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, betas=(0.9, 0.98), eps=1e-9)
    sents = [torch.randint(4, 12, (n,)) for n in (5, 3, 6, 4)]
    pad = lambda seqs: nn.utils.rnn.pad_sequence(seqs, padding_value=PAD_IDX)  # (S, N)
    wrap = lambda s: torch.cat([torch.tensor([BOS_IDX]), s, torch.tensor([EOS_IDX])])
    src, tgt = pad([wrap(s) for s in sents]), pad([wrap(s.flip(0)) for s in sents])
    model.train()
    for step in range(30):  # train_epoch on one batch
        tgt_input = tgt[:-1, :]
        src_mask, tgt_mask, src_padding_mask, tgt_padding_mask = create_mask(src, tgt_input)
        logits = model(src, tgt_input, src_mask, tgt_mask, src_padding_mask, tgt_padding_mask, src_padding_mask)
        loss = loss_fn(logits.reshape(-1, logits.shape[-1]), tgt[1:, :].reshape(-1))
        optimizer.zero_grad(); loss.backward(); optimizer.step()
    model.eval()
    with torch.no_grad():
        changed = tgt_input.clone()
        changed[4, 0] = 11 if changed[4, 0] != 11 else 10  # change a later target token of sentence 0
        a = model(src, tgt_input, *create_mask(src, tgt_input), src_padding_mask)
        b = model(src, changed, *create_mask(src, changed), src_padding_mask)
        print(f"loss {loss.item():.4f}; position 0 moved by a token at position 4:", (a[0, 0] - b[0, 0]).abs().max().item())
        num_tokens = src.shape[0]
        src_mask = (torch.zeros(num_tokens, num_tokens)).type(torch.bool)
        print("greedy:", greedy_decode(model, src[:, :1], src_mask, num_tokens, BOS_IDX).flatten().tolist())
