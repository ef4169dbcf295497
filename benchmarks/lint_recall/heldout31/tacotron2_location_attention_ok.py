"""Tacotron 2 written the way NVIDIA/tacotron2 writes it (model.py, layers.py, utils.py):
``get_mask_from_lengths``, a convolutional encoder with a packed bidirectional LSTM,
location-sensitive attention over the encoder outputs with cumulative attention weights,
prenet, attention and decoder LSTM cells, teacher-forced decoding and ``parse_output``,
which masks the padded mel frames and gate outputs.

Source: TransformerLensOrg/TransformerLens PR #366, conventions.md §3 item 20 and §5 item 5, seed masked_fill_inplace.txt (例子)
"""
import torch
import torch.nn.functional as F
from torch import nn


def get_mask_from_lengths(lengths, max_len=None):
    max_len = int(torch.max(lengths).item()) if max_len is None else max_len
    ids = torch.arange(0, max_len, device=lengths.device)
    return ids < lengths.unsqueeze(1)


class LocationLayer(nn.Module):
    def __init__(self, attention_n_filters, attention_kernel_size, attention_dim):
        super().__init__()
        padding = int((attention_kernel_size - 1) / 2)
        self.location_conv = nn.Conv1d(2, attention_n_filters, attention_kernel_size, padding=padding, bias=False)
        self.location_dense = nn.Linear(attention_n_filters, attention_dim, bias=False)

    def forward(self, attention_weights_cat):
        return self.location_dense(self.location_conv(attention_weights_cat).transpose(1, 2))


class Attention(nn.Module):
    def __init__(self, attention_rnn_dim, embedding_dim, attention_dim, n_filters=8, kernel_size=5):
        super().__init__()
        self.query_layer = nn.Linear(attention_rnn_dim, attention_dim, bias=False)
        self.memory_layer = nn.Linear(embedding_dim, attention_dim, bias=False)
        self.v = nn.Linear(attention_dim, 1, bias=False)
        self.location_layer = LocationLayer(n_filters, kernel_size, attention_dim)
        self.score_mask_value = -float("inf")

    def get_alignment_energies(self, query, processed_memory, attention_weights_cat):
        processed_query = self.query_layer(query.unsqueeze(1))
        processed_attention_weights = self.location_layer(attention_weights_cat)
        energies = self.v(torch.tanh(processed_query + processed_attention_weights + processed_memory))
        return energies.squeeze(-1)

    def forward(self, attention_hidden_state, memory, processed_memory, attention_weights_cat, mask):
        alignment = self.get_alignment_energies(attention_hidden_state, processed_memory, attention_weights_cat)
        if mask is not None:
            alignment.data.masked_fill_(mask, self.score_mask_value)
        attention_weights = F.softmax(alignment, dim=1)
        attention_context = torch.bmm(attention_weights.unsqueeze(1), memory).squeeze(1)
        return attention_context, attention_weights


class Decoder(nn.Module):
    def __init__(self, n_mel_channels=8, encoder_embedding_dim=16, rnn_dim=32, prenet_dim=16):
        super().__init__()
        self.n_mel_channels, self.encoder_embedding_dim = n_mel_channels, encoder_embedding_dim
        self.prenet = nn.ModuleList([nn.Linear(n_mel_channels, prenet_dim), nn.Linear(prenet_dim, prenet_dim)])
        self.attention_rnn = nn.LSTMCell(prenet_dim + encoder_embedding_dim, rnn_dim)
        self.attention_layer = Attention(rnn_dim, encoder_embedding_dim, 16)
        self.decoder_rnn = nn.LSTMCell(rnn_dim + encoder_embedding_dim, rnn_dim)
        self.linear_projection = nn.Linear(rnn_dim + encoder_embedding_dim, n_mel_channels)
        self.gate_layer = nn.Linear(rnn_dim + encoder_embedding_dim, 1)

    def forward(self, memory, decoder_inputs, memory_lengths):
        B, T_in, _ = memory.shape
        go = memory.new_zeros(1, B, self.n_mel_channels)
        x = torch.cat((go, decoder_inputs.permute(2, 0, 1)), dim=0)
        for linear in self.prenet:
            x = F.dropout(F.relu(linear(x)), p=0.5, training=self.training)
        mask = ~get_mask_from_lengths(memory_lengths, T_in)
        att_h = att_c = dec_h = dec_c = memory.new_zeros(B, self.attention_rnn.hidden_size)
        attention_weights = attention_weights_cum = memory.new_zeros(B, T_in)
        attention_context = memory.new_zeros(B, self.encoder_embedding_dim)
        processed_memory = self.attention_layer.memory_layer(memory)
        mel_outputs, gate_outputs, alignments = [], [], []
        for decoder_input in x[:-1]:
            att_h, att_c = self.attention_rnn(torch.cat((decoder_input, attention_context), -1), (att_h, att_c))
            weights_cat = torch.cat((attention_weights.unsqueeze(1), attention_weights_cum.unsqueeze(1)), dim=1)
            attention_context, attention_weights = self.attention_layer(att_h, memory, processed_memory, weights_cat, mask)
            attention_weights_cum = attention_weights_cum + attention_weights
            dec_h, dec_c = self.decoder_rnn(torch.cat((att_h, attention_context), -1), (dec_h, dec_c))
            hidden_context = torch.cat((dec_h, attention_context), dim=1)
            mel_outputs.append(self.linear_projection(hidden_context))
            gate_outputs.append(self.gate_layer(hidden_context).squeeze(1))
            alignments.append(attention_weights)
        return torch.stack(mel_outputs, 2), torch.stack(gate_outputs, 1), torch.stack(alignments, 1)


class Tacotron2(nn.Module):
    def __init__(self, n_symbols=30, embedding_dim=16, n_mel_channels=8):
        super().__init__()
        self.n_mel_channels = n_mel_channels
        self.embedding = nn.Embedding(n_symbols, embedding_dim)
        self.convolutions = nn.Sequential(nn.Conv1d(embedding_dim, embedding_dim, 5, padding=2), nn.ReLU())
        self.lstm = nn.LSTM(embedding_dim, embedding_dim // 2, batch_first=True, bidirectional=True)
        self.decoder = Decoder(n_mel_channels, embedding_dim)

    def encode(self, text_inputs, input_lengths):
        keep = get_mask_from_lengths(input_lengths, text_inputs.shape[1]).unsqueeze(1)
        x = self.convolutions(self.embedding(text_inputs).transpose(1, 2) * keep).transpose(1, 2)
        x = nn.utils.rnn.pack_padded_sequence(x, input_lengths.cpu(), batch_first=True)
        outputs, _ = self.lstm(x)
        return nn.utils.rnn.pad_packed_sequence(outputs, batch_first=True, total_length=text_inputs.shape[1])[0]

    def parse_output(self, outputs, output_lengths):
        mask = ~get_mask_from_lengths(output_lengths, outputs[0].size(2))
        mask = mask.expand(self.n_mel_channels, mask.size(0), mask.size(1)).permute(1, 0, 2)
        outputs[0].data.masked_fill_(mask, 0.0)
        outputs[1].data.masked_fill_(mask[:, 0, :], 1e3)
        return outputs

    def forward(self, text_inputs, text_lengths, mels, output_lengths):
        memory = self.encode(text_inputs, text_lengths)
        mel_outputs, gate_outputs, alignments = self.decoder(memory, mels, text_lengths)
        return self.parse_output([mel_outputs, gate_outputs, alignments], output_lengths)


if __name__ == "__main__":
    torch.manual_seed(0)
    model = Tacotron2().eval()
    text, text_lengths = torch.tensor([[4, 9, 13, 2, 7, 21, 5, 8, 3], [6, 12, 1, 19, 11, 0, 0, 0, 0]]), torch.tensor([9, 5])
    mels, output_lengths = torch.randn(2, 8, 7), torch.tensor([7, 5])
    with torch.no_grad():
        mel_out, gate_out, alignments = model(text, text_lengths, mels, output_lengths)
        print("attention weight on padded encoder steps:", alignments[1, :, 5:].sum(-1).max().item())
        alone = model(text[1:, :5], text_lengths[1:], mels[1:, :, :5], output_lengths[1:])[0]
        print("padded item batched vs alone:", (mel_out[1, :, :5] - alone[0]).abs().max().item())
