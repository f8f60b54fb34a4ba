"""The reference agent: a scripted baseline competitor that uses only the platform's public
interfaces from inside a provisioned sandbox (see README.md)."""
