"""Held-out 10: Mozilla TTS's Tacotron 2 (layers/common_layers.py `Attention` with location
features, layers/tacotron2.py `Decoder`, models/tacotron2.py `Tacotron2`, utils/generic_utils.py
`sequence_mask`).

Source: Edresson/TTS PR #1 ("Fix use of operator": `RuntimeError: Subtraction, the `-` operator,
with a bool tensor is not supported. If you are trying to invert a mask, use the `~` or
`bitwise_not()` operator instead.`), on a fork of mozilla/TTS whose attention masks the energies
with `attention.data.masked_fill_(1 - mask, self._mask_value)`; `sequence_mask` returns a
comparison, a bool tensor since PyTorch 1.2, so the subtraction raises on the first decoder step.
Surroundings: the mask made by a helper from the text lengths in the model's forward, handed to
the decoder, stored on it and passed positionally to the attention at every decoder step.
"""

from math import sqrt

import torch
from torch import nn
from torch.nn import functional as F


def sequence_mask(sequence_length, max_len=None):
    if max_len is None:
        max_len = sequence_length.data.max()
    batch_size = sequence_length.size(0)
    seq_range = torch.arange(0, max_len).long()
    seq_range_expand = seq_range.unsqueeze(0).expand(batch_size, max_len)
    if sequence_length.is_cuda:
        seq_range_expand = seq_range_expand.cuda()
    seq_length_expand = sequence_length.unsqueeze(1).expand_as(seq_range_expand)
    return seq_range_expand < seq_length_expand


class Linear(nn.Module):
    def __init__(self, in_features, out_features, bias=True, init_gain='linear'):
        super(Linear, self).__init__()
        self.linear_layer = torch.nn.Linear(in_features, out_features, bias=bias)
        torch.nn.init.xavier_uniform_(self.linear_layer.weight, gain=torch.nn.init.calculate_gain(init_gain))

    def forward(self, x):
        return self.linear_layer(x)


class LocationLayer(nn.Module):
    def __init__(self, attention_n_filters, attention_kernel_size, attention_dim):
        super(LocationLayer, self).__init__()
        self.location_conv = nn.Conv1d(in_channels=2, out_channels=attention_n_filters,
                                       kernel_size=attention_kernel_size, stride=1,
                                       padding=(attention_kernel_size - 1) // 2, bias=False)
        self.location_dense = Linear(attention_n_filters, attention_dim, bias=False, init_gain='tanh')

    def forward(self, attention_cat):
        processed_attention = self.location_conv(attention_cat)
        return self.location_dense(processed_attention.transpose(1, 2))


class Attention(nn.Module):
    def __init__(self, attention_rnn_dim, embedding_dim, attention_dim, attention_location_n_filters,
                 attention_location_kernel_size):
        super(Attention, self).__init__()
        self.query_layer = Linear(attention_rnn_dim, attention_dim, bias=False, init_gain='tanh')
        self.inputs_layer = Linear(embedding_dim, attention_dim, bias=False, init_gain='tanh')
        self.v = Linear(attention_dim, 1, bias=True)
        self.location_layer = LocationLayer(attention_location_n_filters, attention_location_kernel_size,
                                            attention_dim)
        self._mask_value = -float("inf")

    def init_states(self, inputs):
        B = inputs.shape[0]
        T = inputs.shape[1]
        self.attention_weights = inputs.data.new(B, T).zero_()
        self.attention_weights_cum = inputs.data.new(B, T).zero_()

    def update_location_attention(self, alignments):
        self.attention_weights_cum += alignments

    def get_location_attention(self, query, processed_inputs):
        attention_cat = torch.cat((self.attention_weights.unsqueeze(1), self.attention_weights_cum.unsqueeze(1)),
                                  dim=1)
        processed_query = self.query_layer(query.unsqueeze(1))
        processed_attention_weights = self.location_layer(attention_cat)
        energies = self.v(torch.tanh(processed_query + processed_attention_weights + processed_inputs))
        return energies.squeeze(-1), processed_query

    def forward(self, attention_hidden_state, inputs, processed_inputs, mask):
        attention, _ = self.get_location_attention(attention_hidden_state, processed_inputs)
        # apply masking
        if mask is not None:
            attention.data.masked_fill_(1 - mask, self._mask_value)  # expect: MC512 attribute
        # normalize attention values
        alignment = torch.softmax(attention, dim=-1)
        self.update_location_attention(alignment)
        context = torch.bmm(alignment.unsqueeze(1), inputs).squeeze(1)
        self.attention_weights = alignment
        return context


class Decoder(nn.Module):
    def __init__(self, in_features, memory_dim, r=1, attention_rnn_dim=64, decoder_rnn_dim=64):
        super(Decoder, self).__init__()
        self.memory_dim = memory_dim
        self.r = r
        self.attention_rnn = nn.LSTMCell(memory_dim + in_features, attention_rnn_dim)
        self.attention = Attention(attention_rnn_dim=attention_rnn_dim, embedding_dim=in_features,
                                   attention_dim=32, attention_location_n_filters=8,
                                   attention_location_kernel_size=31)
        self.decoder_rnn = nn.LSTMCell(attention_rnn_dim + in_features, decoder_rnn_dim)
        self.linear_projection = Linear(decoder_rnn_dim + in_features, memory_dim * r)

    def _init_states(self, inputs, mask):
        B = inputs.size(0)
        self.query = inputs.new_zeros(B, self.attention_rnn.hidden_size)
        self.attention_rnn_cell_state = inputs.new_zeros(B, self.attention_rnn.hidden_size)
        self.decoder_hidden = inputs.new_zeros(B, self.decoder_rnn.hidden_size)
        self.decoder_cell = inputs.new_zeros(B, self.decoder_rnn.hidden_size)
        self.context = inputs.new_zeros(B, inputs.size(2))
        self.inputs = inputs
        self.processed_inputs = self.attention.inputs_layer(inputs)
        self.mask = mask

    def decode(self, memory):
        cell_input = torch.cat((memory, self.context), -1)
        self.query, self.attention_rnn_cell_state = self.attention_rnn(
            cell_input, (self.query, self.attention_rnn_cell_state))
        self.context = self.attention(self.query, self.inputs, self.processed_inputs, self.mask)
        decoder_rnn_input = torch.cat((self.query, self.context), -1)
        self.decoder_hidden, self.decoder_cell = self.decoder_rnn(
            decoder_rnn_input, (self.decoder_hidden, self.decoder_cell))
        decoder_hidden_context = torch.cat((self.decoder_hidden, self.context), dim=1)
        return self.linear_projection(decoder_hidden_context)

    def forward(self, inputs, memories, mask):
        memory = inputs.new_zeros(inputs.size(0), self.memory_dim)
        self._init_states(inputs, mask=mask)
        self.attention.init_states(inputs)
        outputs = []
        for t in range(memories.size(1)):
            mel_output = self.decode(memory)
            outputs.append(mel_output)
            memory = memories[:, t]
        return torch.stack(outputs, dim=1)


class Tacotron2(nn.Module):
    def __init__(self, num_chars, mel_dim=20, embedding_dim=64):
        super(Tacotron2, self).__init__()
        self.embedding = nn.Embedding(num_chars, embedding_dim)
        std = sqrt(2.0 / (num_chars + embedding_dim))
        val = sqrt(3.0) * std  # uniform bounds for std
        self.embedding.weight.data.uniform_(-val, val)
        self.encoder = nn.LSTM(embedding_dim, embedding_dim // 2, batch_first=True, bidirectional=True)
        self.decoder = Decoder(embedding_dim, mel_dim)

    def forward(self, text, text_lengths, mel_specs=None):
        # compute mask for padding
        mask = sequence_mask(text_lengths).to(text.device)
        embedded_inputs = self.embedding(text)
        encoder_outputs, _ = self.encoder(embedded_inputs)
        mel_outputs = self.decoder(encoder_outputs, mel_specs, mask)
        return F.relu(mel_outputs)
