# An example host configuration using the flake's module. In the host's flake:
#   inputs.boxmaker.url = "github:<owner>/boxmaker";
#   inputs.boxmaker.inputs.nixpkgs.follows = "nixpkgs";  # one nixpkgs: the module builds with the host's
#   nixosConfigurations.straylight = nixpkgs.lib.nixosSystem {
#     modules = [ boxmaker.nixosModules.default ./boxmaker.nix ];
#   };
# and this file as ./boxmaker.nix. Addresses are examples.
{ ... }:
{
  services.boxmaker = {
    enable = true;
    ownerUsers = [ "owner" ];
    egress = {
      router = [ "127.0.0.1" ];                    # the router on this host
      mattermost = [ "100.64.0.8" "100.100.100.100" ]; # Mattermost and the tailnet DNS resolver
      honcho = [ "100.64.0.9" ];
      grants = [ ];                                # hosts your grants name; none: no tool network
    };
    credentials.mattermost_token = "/etc/boxmaker/credentials/mattermost_token.cred";
    systemPrompt = ./system.md;
    configFiles.allowlist = ./allowlist; # Mattermost user ids, one per line
    settings = {
      inferproxy.upstream = "tcp://127.0.0.1:8080";
      inference.model = "ornith";
      gateway.server = "https://chat.example.org";
      gateway.allowlist = "allowlist"; # relative: beside the config file
      # Who may answer approvals: the owner's users on approve.sock (its directory admits only
      # ownerUsers), and the owner's Mattermost user id.
      broker.approvers = [ "local:socket" "8xq3mattermostuserid0000aa" ];
    };
  };
}
