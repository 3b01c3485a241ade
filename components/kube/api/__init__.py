"""The Kubernetes API as the program calls it itself, from its resource hooks: a small client
(`client`), the Node a machine registered (`nodes`), its drain (`drain`) and the pools' roll
slots (`slots`). Why not kubectl over SSH: docs/decisions/058-a-node-leaves-through-the-api.md.
"""
