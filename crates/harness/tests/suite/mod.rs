mod fake_gateway;
mod file_commands;
mod reconnect;
mod startup;
mod status;
mod websocket;
