#!/bin/bash
# Runs in the sandbox's work dir before the episode.
set -e
mkdir -p conf templates
printf 'TITLE="My Site"\nAUTHOR=Ann\n' > conf/site.env
printf '<h1>@TITLE@</h1><p>by @AUTHOR@</p>\n' > templates/index.html
cat > deploy.sh <<'EOF'
#!/bin/bash
set -e
source config/site.env
mkdir -p site
sed -e "s/@TITLE@/$TITLE/" -e "s/@AUTHOR@/$AUTHOR/" templates/index.html > site/index.html
echo deployed
EOF
chmod +x deploy.sh
