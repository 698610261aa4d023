"""Plugins as the controller runs them: one started instance per plugin name in `host`, an
out-of-process plugin started (or dialed) and negotiated with over go-plugin's handshake in
`launch`, and `RemotePlugin`, the supervised proxy that makes such a process just another
`DevicePlugin`, in `remote`; a plugin's options checked against its config schema in `options`.
The plugin contract itself is `plugins.base`.
"""
