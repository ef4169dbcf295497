"""CS224N assignment 4: NMT with multiplicative attention, nmt_model.py filled in (trimmed).

A student's solution of the Cherokee/Mandarin-to-English NMT model: bidirectional LSTM encoder,
LSTMCell decoder with input feeding and multiplicative attention (torch.bmm), the handout's
shape comments kept. generate_sent_masks returns a bool mask for step()'s masked_fill, and the
decoder is initialised from the mean of the encoder states over the real source words.

Source: huggingface/transformers#32195 and conventions.md section 1 (the HF 4.x
AttentionMaskConverter row: masks inverted with `1 - mask`; the Keras row: `(1 - mask) * -1e9`),
the `1 - mask` inversion written for 0/1 float masks and kept after the mask became bool.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence


class NMT(nn.Module):
    def __init__(self, embed_size, hidden_size, src_vocab_size, tgt_vocab_size, dropout_rate=0.2):
        super().__init__()
        self.hidden_size = hidden_size
        self.source_embedding = nn.Embedding(src_vocab_size, embed_size, padding_idx=0)
        self.target_embedding = nn.Embedding(tgt_vocab_size, embed_size, padding_idx=0)
        ### YOUR CODE HERE (~8 Lines)
        self.encoder = nn.LSTM(embed_size, hidden_size, bidirectional=True)
        self.decoder = nn.LSTMCell(embed_size + hidden_size, hidden_size)
        self.h_projection = nn.Linear(2 * hidden_size, hidden_size, bias=False)
        self.c_projection = nn.Linear(2 * hidden_size, hidden_size, bias=False)
        self.att_projection = nn.Linear(2 * hidden_size, hidden_size, bias=False)
        self.combined_output_projection = nn.Linear(3 * hidden_size, hidden_size, bias=False)
        self.target_vocab_projection = nn.Linear(hidden_size, tgt_vocab_size, bias=False)
        self.dropout = nn.Dropout(dropout_rate)
        ### END YOUR CODE

    def forward(self, source_padded, source_lengths, target_padded):
        """source_padded: (src_len, b), target_padded: (tgt_len, b). Returns (b,) log-likelihoods."""
        enc_hiddens = self.encode(source_padded, source_lengths)  # (b, src_len, 2h)
        enc_masks = self.generate_sent_masks(enc_hiddens, source_lengths)  # (b, src_len)
        dec_init_state = self.init_decoder_state(enc_hiddens, enc_masks)
        combined_outputs = self.decode(enc_hiddens, enc_masks, dec_init_state, target_padded)
        P = F.log_softmax(self.target_vocab_projection(combined_outputs), dim=-1)
        target_masks = (target_padded != 0).float()
        gold = torch.gather(P, index=target_padded[1:].unsqueeze(-1), dim=-1).squeeze(-1)
        return (gold * target_masks[1:]).sum(dim=0)

    def encode(self, source_padded, source_lengths):
        ### YOUR CODE HERE (~ 8 Lines)
        X = self.source_embedding(source_padded)  # (src_len, b, e)
        enc_hiddens, _ = self.encoder(pack_padded_sequence(X, source_lengths))
        enc_hiddens, _ = pad_packed_sequence(enc_hiddens)  # (src_len, b, 2h)
        return enc_hiddens.permute(1, 0, 2)  # (b, src_len, 2h)
        ### END YOUR CODE

    def init_decoder_state(self, enc_hiddens, enc_masks):
        """Decoder state from the mean encoder state over the real source words: ((b, h), (b, h))."""
        keep = (~enc_masks).unsqueeze(-1)
        mean_hidden = (enc_hiddens * keep).sum(dim=1) / keep.sum(dim=1)  # (b, 2h)
        return self.h_projection(mean_hidden), self.c_projection(mean_hidden)

    def decode(self, enc_hiddens, enc_masks, dec_init_state, target_padded):
        target_padded = target_padded[:-1]  # chop the <END> token
        dec_state = dec_init_state
        o_prev = torch.zeros(enc_hiddens.size(0), self.hidden_size)
        combined_outputs = []
        ### YOUR CODE HERE (~9 Lines)
        enc_hiddens_proj = self.att_projection(enc_hiddens)  # (b, src_len, h)
        Y = self.target_embedding(target_padded)  # (tgt_len, b, e)
        for Y_t in torch.split(Y, 1, dim=0):
            Ybar_t = torch.cat((Y_t.squeeze(0), o_prev), dim=1)  # (b, e + h)
            dec_state, o_t, _ = self.step(Ybar_t, dec_state, enc_hiddens, enc_hiddens_proj, enc_masks)
            combined_outputs.append(o_t)
            o_prev = o_t
        combined_outputs = torch.stack(combined_outputs, dim=0)  # (tgt_len, b, h)
        ### END YOUR CODE
        return combined_outputs

    def step(self, Ybar_t, dec_state, enc_hiddens, enc_hiddens_proj, enc_masks):
        ### YOUR CODE HERE (~3 Lines)
        dec_state = self.decoder(Ybar_t, dec_state)
        dec_hidden, dec_cell = dec_state
        e_t = torch.bmm(enc_hiddens_proj, dec_hidden.unsqueeze(2)).squeeze(2)  # (b, src_len)
        ### END YOUR CODE

        # Set e_t to -inf where enc_masks has 1
        if enc_masks is not None:
            e_t = e_t.masked_fill(enc_masks, -float("inf"))

        ### YOUR CODE HERE (~6 Lines)
        alpha_t = F.softmax(e_t, dim=1)  # (b, src_len)
        a_t = torch.bmm(alpha_t.unsqueeze(1), enc_hiddens).squeeze(1)  # (b, 2h)
        U_t = torch.cat((a_t, dec_hidden), dim=1)  # (b, 3h)
        O_t = self.dropout(torch.tanh(self.combined_output_projection(U_t)))  # (b, h)
        ### END YOUR CODE
        return dec_state, O_t, e_t

    def generate_sent_masks(self, enc_hiddens, source_lengths):
        """Sentence masks of shape (b, src_len): True where the source position is padding."""
        enc_masks = torch.zeros(enc_hiddens.size(0), enc_hiddens.size(1), dtype=torch.bool)
        for e_id, src_len in enumerate(source_lengths):
            enc_masks[e_id, src_len:] = True
        return enc_masks


if __name__ == "__main__":
    torch.manual_seed(224)
    model = NMT(embed_size=16, hidden_size=12, src_vocab_size=40, tgt_vocab_size=50)
    source_lengths = [6, 4, 3]  # sorted, as pack_padded_sequence wants
    source_padded = torch.zeros(6, 3, dtype=torch.long)
    for b, n in enumerate(source_lengths):
        source_padded[:n, b] = torch.randint(1, 40, (n,))
    target_padded = torch.randint(1, 50, (5, 3))
    target_padded[4:, 2] = 0
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for it in range(3):
        loss = -model(source_padded, source_lengths, target_padded).sum() / 3
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"iter {it}: loss {loss.item():.4f}")
